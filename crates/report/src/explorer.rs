//! Pictures of attention: a PNG grid of every head's map, and a self-contained HTML page to
//! explore them (no network, no CDN: data and script are inlined).

use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use headlab_heads::{AttentionMaps, HeadRow};

use crate::ReportError;
use crate::plot::ensure_font;

/// White to dark blue, by weight in [0, 1].
fn shade(w: f32) -> RGBColor {
    let w = w.clamp(0.0, 1.0).sqrt();
    let lerp = |a: f32, b: f32| (a + (b - a) * w) as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// Draws a grid of `layers x heads` attention maps with token labels.
pub fn maps_png(path: &Path, maps: &AttentionMaps, rows: &[HeadRow]) -> Result<(), ReportError> {
    ensure_font();
    let t = maps.tokens.len();
    let layers = maps.weights.len();
    let heads = maps.weights.first().map_or(0, |l| l.len());
    let (cell, stride) = cell_and_label_stride(t);
    let cell = cell as i32;
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
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let font = ("sans-serif", (cell as f64 * 0.9).clamp(10.0, 14.0)).into_font();
    for l in 0..layers {
        for h in 0..heads {
            let (x0, y0) = (panel.0 * h as i32, panel.1 * l as i32);
            let label = rows
                .iter()
                .find(|r| r.scores.layer == l && r.scores.head == h)
                .map_or(String::new(), |r| format!(" ({})", r.label));
            root.draw(&Text::new(
                format!("head {l}.{h}{label}"),
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
                if i % stride != 0 {
                    continue;
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

/// Cell size in pixels for `t` tokens, and which tokens get a label: every `stride`-th.
/// Labels need about 11 px, so with small cells long texts are labelled sparsely instead of
/// smearing into each other.
fn cell_and_label_stride(t: usize) -> (usize, usize) {
    let cell = (320 / t.max(1)).clamp(6, 24);
    (cell, LABEL_PX.div_ceil(cell))
}

/// Height a token label needs.
const LABEL_PX: usize = 11;

/// Escapes text for HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The explorer page: head table, a layer/head picker, hover a token to see where it looks,
/// and a small map of every head; on a grammar run, with `syntax` (`syntax.json`), the
/// relation table against each relation's fixed-offset rule, the syntactic head marked.
pub fn html_page(
    title: &str,
    maps: &AttentionMaps,
    rows: &[HeadRow],
    syntax: Option<&serde_json::Value>,
) -> String {
    #[derive(Serialize)]
    struct Data<'a> {
        title: &'a str,
        maps: &'a AttentionMaps,
        rows: &'a [HeadRow],
        syntax: Option<&'a serde_json::Value>,
    }
    let data = Data {
        title,
        maps,
        rows,
        syntax,
    };
    let json = serde_json::to_string(&data).expect("serialisable");
    page(title, &json)
}

/// The explorer's HTML, CSS and script (real files in `assets/`, embedded at build time)
/// around `json`.
fn page(title: &str, json: &str) -> String {
    const HTML: &str = include_str!("../assets/explorer.html");
    const CSS: &str = include_str!("../assets/explorer.css");
    const JS: &str = include_str!("../assets/explorer.js");
    fill(HTML, CSS, JS, title, json)
}

/// A page template filled: its `__HEADLAB_CSS__`, `__HEADLAB_TITLE__` (escaped),
/// `__HEADLAB_JS__`, and `json` at `__HEADLAB_DATA__`. In the JSON, `<`, `>` and `&` become
/// `\u003c`, `\u003e`, `\u0026` (and the line separators U+2028, U+2029 their escapes), which
/// `JSON.parse` reads back: no text from a corpus can close the script, open a comment or
/// start a tag.
pub(crate) fn fill(html: &str, css: &str, js: &str, title: &str, json: &str) -> String {
    let json = json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    // The data goes in last, between the halves of the page, so nothing in it is read as a
    // placeholder.
    let (head, tail) = html
        .split_once("__HEADLAB_DATA__")
        .expect("the page has a data placeholder");
    let head = head
        .replace("__HEADLAB_CSS__", css)
        .replace("__HEADLAB_TITLE__", &escape(title));
    let tail = tail.replace("__HEADLAB_JS__", js);
    format!("{head}{json}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At any length, drawn labels are at least a label's height apart (at 50 tokens they
    /// were 6 px apart in a 9 px font, a smear).
    #[test]
    fn labels_never_overlap() {
        for t in 1..=512 {
            let (cell, stride) = cell_and_label_stride(t);
            assert!(
                cell * stride >= LABEL_PX,
                "{t} tokens: {cell} px cells, every {stride}"
            );
            assert!(
                stride == 1 || cell * (stride - 1) < LABEL_PX,
                "{t}: labels thinned too far"
            );
        }
    }

    /// Corpus text that looks like markup stays text: the page holds exactly its own two
    /// scripts, no comment, and the JSON still parses to the same tokens.
    #[test]
    fn markup_in_the_data_cannot_escape_the_script() {
        let tokens = [
            "</script>",
            "<!--",
            "<script>",
            "<img src=x onerror=alert(1)>",
            "${x}",
            "&amp;",
        ];
        let maps = AttentionMaps {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            weights: vec![],
        };
        let html = html_page("a </script> title", &maps, &[], None);
        assert_eq!(html.matches("</script>").count(), 2, "{html}");
        assert_eq!(html.matches("<script").count(), 2);
        assert!(!html.contains("<!--") && !html.contains("<img"));
        let start = html.find("application/json\">").unwrap() + "application/json\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(data["maps"]["tokens"][0], "</script>");
        assert_eq!(data["maps"]["tokens"][5], "&amp;");
        assert_eq!(data["title"], "a </script> title");
    }
}
