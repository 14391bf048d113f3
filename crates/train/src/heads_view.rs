//! Pictures of attention: a PNG grid of every head's map, and a self-contained HTML page to
//! explore them (no network, no CDN: data and script are inlined).

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::heads::HeadRow;
use crate::plot::ensure_font;

/// Attention maps of one text: `weights[layer][head]` is row-major `[t, t]`.
#[derive(Debug, Clone, Serialize)]
pub struct AttentionMaps {
    /// Token labels, whitespace made visible.
    pub tokens: Vec<String>,
    /// Per layer, per head.
    pub weights: Vec<Vec<Vec<f32>>>,
}

/// White to dark blue, by weight in [0, 1].
fn shade(w: f32) -> RGBColor {
    let w = w.clamp(0.0, 1.0).sqrt();
    let lerp = |a: f32, b: f32| (a + (b - a) * w) as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// Draws a grid of `layers x heads` attention maps with token labels.
pub fn maps_png(path: &Path, maps: &AttentionMaps, rows: &[HeadRow]) -> Result<(), String> {
    ensure_font();
    let t = maps.tokens.len();
    let layers = maps.weights.len();
    let heads = maps.weights.first().map_or(0, |l| l.len());
    let cell = (320 / t.max(1)).clamp(6, 24) as i32;
    let label_w = 70;
    let panel = (
        label_w + cell * t as i32 + 16,
        40 + cell * t as i32 + label_w,
    );
    let size = (
        (panel.0 * heads as i32).max(200) as u32,
        (panel.1 * layers as i32).max(100) as u32,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let font = ("sans-serif", (cell as f64 * 0.9).clamp(9.0, 14.0)).into_font();
    for l in 0..layers {
        for h in 0..heads {
            let (x0, y0) = (panel.0 * h as i32, panel.1 * l as i32);
            let label = rows
                .iter()
                .find(|r| r.scores.layer == l && r.scores.head == h)
                .map_or(String::new(), |r| format!(" ({})", r.label));
            root.draw(&Text::new(
                format!("layer {l} head {h}{label}"),
                (x0 + label_w, y0 + 10),
                ("sans-serif", 15).into_font(),
            ))
            .map_err(|e| err(&e))?;
            let (gx, gy) = (x0 + label_w, y0 + 36);
            let a = &maps.weights[l][h];
            for i in 0..t {
                for j in 0..t {
                    let (x, y) = (gx + j as i32 * cell, gy + i as i32 * cell);
                    root.draw(&Rectangle::new(
                        [(x, y), (x + cell, y + cell)],
                        shade(a[i * t + j]).filled(),
                    ))
                    .map_err(|e| err(&e))?;
                }
                // Query tokens down the left, key tokens along the bottom.
                let tok = &maps.tokens[i];
                root.draw(&Text::new(
                    tok.clone(),
                    (x0 + 4, gy + i as i32 * cell),
                    font.clone(),
                ))
                .map_err(|e| err(&e))?;
                let style = font.clone().transform(FontTransform::Rotate90);
                root.draw(&Text::new(
                    tok.clone(),
                    (gx + i as i32 * cell + cell, gy + t as i32 * cell + 4),
                    style,
                ))
                .map_err(|e| err(&e))?;
            }
            root.draw(&Rectangle::new(
                [(gx, gy), (gx + cell * t as i32, gy + cell * t as i32)],
                BLACK.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))
}

/// Escapes text for HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The explorer page: head table, a layer/head picker, hover a token to see where it looks,
/// and a small map of every head.
pub fn html_page(title: &str, maps: &AttentionMaps, rows: &[HeadRow]) -> String {
    let shown = escape(title);
    #[derive(Serialize)]
    struct Data<'a> {
        title: &'a str,
        maps: &'a AttentionMaps,
        rows: &'a [HeadRow],
    }
    let json = serde_json::to_string(&Data { title, maps, rows }).expect("serialisable");
    // `</` cannot end the script early once escaped.
    let json = json.replace("</", "<\\/");
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{shown}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: right; }}
tr.sel {{ background: #fff3c4; }}
.tok {{ display: inline-block; padding: 2px 3px; margin: 1px; border: 1px solid #ddd; font-family: monospace; cursor: default; }}
.tok.q {{ outline: 2px solid #d62728; }}
#grid {{ display: flex; flex-wrap: wrap; gap: 12px; }}
.panel {{ border: 1px solid #ccc; padding: 6px; cursor: pointer; }}
.panel.sel {{ border-color: #d62728; }}
.panel canvas {{ image-rendering: pixelated; display: block; }}
</style></head>
<body>
<h1>{shown}</h1>
<p>Pick a head, then hover a token: the other tokens are shaded by how much that token's query attends to them.</p>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<span id="desc"></span>
<div id="tokens"></div>
<h2>Every head</h2>
<div id="grid"></div>
<h2>Head table</h2>
<table id="table"></table>
<script id="data" type="application/json">{json}</script>
<script>
const D = JSON.parse(document.getElementById('data').textContent);
const T = D.maps.tokens.length, L = D.maps.weights.length, H = L ? D.maps.weights[0].length : 0;
let cur = {{ layer: 0, head: 0 }};
const shade = w => {{ const s = Math.sqrt(Math.max(0, Math.min(1, w)));
  return `rgb(${{255 - 247 * s | 0}},${{255 - 207 * s | 0}},${{255 - 148 * s | 0}})`; }};
const row = (l, h) => D.rows.find(r => r.layer === l && r.head === h);
function pick(l, h) {{
  cur = {{ layer: l, head: h }};
  document.getElementById('layer').value = l; document.getElementById('head').value = h;
  const r = row(l, h);
  document.getElementById('desc').textContent = r ? ` ${{r.label}}: previous-token ${{r.previous_token.toFixed(2)}}, induction ${{r.induction.toFixed(2)}}` : '';
  document.querySelectorAll('.panel').forEach(p => p.classList.toggle('sel', +p.dataset.layer === l && +p.dataset.head === h));
  document.querySelectorAll('#table tr[data-layer]').forEach(tr => tr.classList.toggle('sel', +tr.dataset.layer === l && +tr.dataset.head === h));
  hover(-1);
}}
function hover(i) {{
  const a = D.maps.weights[cur.layer][cur.head];
  document.querySelectorAll('#tokens .tok').forEach((el, j) => {{
    el.classList.toggle('q', j === i);
    el.style.background = i < 0 ? '' : shade(a[i * T + j]);
    el.title = i < 0 ? '' : (a[i * T + j] * 100).toFixed(1) + '%';
  }});
}}
const tokDiv = document.getElementById('tokens');
D.maps.tokens.forEach((t, i) => {{ const s = document.createElement('span'); s.className = 'tok'; s.textContent = t;
  s.onmouseenter = () => hover(i); s.onmouseleave = () => hover(-1); tokDiv.appendChild(s); }});
for (const [id, n] of [['layer', L], ['head', H]]) {{
  const sel = document.getElementById(id);
  for (let k = 0; k < n; k++) sel.add(new Option(k, k));
  sel.onchange = () => pick(+document.getElementById('layer').value, +document.getElementById('head').value);
}}
const grid = document.getElementById('grid'), px = Math.max(2, Math.floor(160 / Math.max(T, 1)));
for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {{
  const p = document.createElement('div'); p.className = 'panel'; p.dataset.layer = l; p.dataset.head = h;
  const r = row(l, h); const cap = document.createElement('div');
  cap.textContent = `L${{l}} H${{h}}` + (r ? ` ${{r.label}}` : ''); p.appendChild(cap);
  const c = document.createElement('canvas'); c.width = c.height = T * px; p.appendChild(c);
  const g = c.getContext('2d'), a = D.maps.weights[l][h]; let cells = 0;
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {{
    const w = a[i * T + j]; if (w > 0.01) cells++; g.fillStyle = shade(w); g.fillRect(j * px, i * px, px, px); }}
  p.dataset.cells = cells; p.onclick = () => pick(l, h); grid.appendChild(p);
}}
const cols = ['layer', 'head', 'label', 'previous_token', 'induction', 'duplicate_token', 'first_token', 'mean_distance', 'entropy', 'ablation_zero', 'ablation_mean', 'grad_importance'];
const tbl = document.getElementById('table');
tbl.innerHTML = '<tr>' + cols.map(c => `<th>${{c}}</th>`).join('') + '</tr>';
for (const r of D.rows) {{ const tr = tbl.insertRow(); tr.dataset.layer = r.layer; tr.dataset.head = r.head;
  tr.innerHTML = cols.map(c => `<td>${{typeof r[c] === 'number' && !Number.isInteger(r[c]) ? r[c].toFixed(3) : r[c]}}</td>`).join('');
  tr.onclick = () => pick(r.layer, r.head); }}
if (L) pick(0, 0);
document.body.dataset.ready = '1';
</script>
</body></html>
"#
    )
}
