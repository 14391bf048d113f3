const D = JSON.parse(document.getElementById('data').textContent);
const T = D.maps.tokens.length, L = D.maps.weights.length, H = L ? D.maps.weights[0].length : 0;
let cur = { layer: 0, head: 0 };
const shade = w => { const s = Math.sqrt(Math.max(0, Math.min(1, w)));
  return `rgb(${255 - 247 * s | 0},${255 - 207 * s | 0},${255 - 148 * s | 0})`; };
const row = (l, h) => D.rows.find(r => r.layer === l && r.head === h);
function pick(l, h) {
  cur = { layer: l, head: h };
  document.getElementById('layer').value = l; document.getElementById('head').value = h;
  const r = row(l, h);
  document.getElementById('desc').textContent = r ? ` ${r.label}: previous-token ${r.previous_token.toFixed(2)}, induction ${r.induction.toFixed(2)}` : '';
  document.querySelectorAll('.panel').forEach(p => p.classList.toggle('sel', +p.dataset.layer === l && +p.dataset.head === h));
  document.querySelectorAll('#table tr[data-layer], #relations tr[data-layer]').forEach(tr => tr.classList.toggle('sel', +tr.dataset.layer === l && +tr.dataset.head === h));
  hover(-1);
}
function hover(i) {
  const a = D.maps.weights[cur.layer][cur.head];
  document.querySelectorAll('#tokens .tok').forEach((el, j) => {
    el.classList.toggle('q', j === i);
    el.style.background = i < 0 ? '' : shade(a[i * T + j]);
    el.title = i < 0 ? '' : (a[i * T + j] * 100).toFixed(1) + '%';
  });
}
const tokDiv = document.getElementById('tokens');
D.maps.tokens.forEach((t, i) => { const s = document.createElement('span'); s.className = 'tok'; s.textContent = t;
  s.onmouseenter = () => hover(i); s.onmouseleave = () => hover(-1); tokDiv.appendChild(s); });
for (const [id, n] of [['layer', L], ['head', H]]) {
  const sel = document.getElementById(id);
  for (let k = 0; k < n; k++) sel.add(new Option(k, k));
  sel.onchange = () => pick(+document.getElementById('layer').value, +document.getElementById('head').value);
}
const grid = document.getElementById('grid'), px = Math.max(2, Math.floor(160 / Math.max(T, 1)));
for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
  const p = document.createElement('div'); p.className = 'panel'; p.dataset.layer = l; p.dataset.head = h;
  const r = row(l, h); const cap = document.createElement('div');
  cap.textContent = `${l}.${h}` + (r ? ` ${r.label}` : '') + (r && (r.roles || []).length ? ` (${r.roles.join(', ')})` : ''); p.appendChild(cap);
  const c = document.createElement('canvas'); c.width = c.height = T * px; p.appendChild(c);
  const g = c.getContext('2d'), a = D.maps.weights[l][h]; let cells = 0;
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
    const w = a[i * T + j]; if (w > 0.01) cells++; g.fillStyle = shade(w); g.fillRect(j * px, i * px, px, px); }
  p.dataset.cells = cells; p.onclick = () => pick(l, h); grid.appendChild(p);
}
const cols = ['layer', 'head', 'label', 'previous_token', 'induction', 'duplicate_token', 'first_token', 'mean_distance', 'entropy', 'ablation_zero', 'ablation_mean', 'grad_importance', 'copying', 'ov_top1', 'roles'];
const tbl = document.getElementById('table');
// Headers wrap at their underscores (the CSV's names, spaced), so the table fits the page.
tbl.innerHTML = '<tr>' + cols.map(c => `<th title="${c}">${c.replace(/_/g, ' ')}</th>`).join('') + '</tr>';
// One format per column: the layer and head as whole numbers, every score to 3 decimals (0.000,
// not 0), an undefined score (null: 0/0) as a dash.
const cell = (c, v) => v === null || v === undefined ? '–' : Array.isArray(v) ? v.join(', ')
  : typeof v === 'number' && c !== 'layer' && c !== 'head' ? v.toFixed(3) : v;
for (const r of D.rows) { const tr = tbl.insertRow(); tr.dataset.layer = r.layer; tr.dataset.head = r.head;
  tr.innerHTML = cols.map(c => `<td class="${c}">${cell(c, r[c])}</td>`).join('');
  tr.onclick = () => pick(r.layer, r.head); }
// A grammar run's relation table (syntax.json): built with text nodes, as the rest.
const X = D.syntax;
if (X && Array.isArray(X.relations) && X.relations.length) {
  const add = (tr, tag, text) => { const c = document.createElement(tag); c.textContent = text; tr.appendChild(c); return c; };
  const two = v => (Number.isFinite(v) ? v.toFixed(2) : '–');
  document.getElementById('syntax').hidden = false;
  document.getElementById('margin').textContent = two(X.role_margin);
  document.getElementById('min-arcs').textContent = X.role_min_arcs;
  document.getElementById('syntactic').textContent = X.syntactic_line || 'No head beats its rule by that much.';
  const rels = [...new Set(X.relations.map(r => r.relation))];
  const rt = document.getElementById('relations');
  const hr = rt.insertRow(); add(hr, 'th', 'head'); rels.forEach(r => add(hr, 'th', r));
  const br = rt.insertRow(); add(br, 'td', 'fixed-offset rule').className = 'label';
  rels.forEach(r => { const b = X.relations.find(x => x.relation === r).baseline; add(br, 'td', `${two(b.accuracy)} (${b.offset} back)`); });
  const heads = [...new Set(X.relations.map(r => `${r.layer}.${r.head}`))];
  for (const name of heads) {
    const tr = rt.insertRow(), [l, h] = name.split('.').map(Number);
    tr.dataset.layer = l; tr.dataset.head = h;
    if (X.syntactic === name) tr.classList.add('syntactic');
    add(tr, 'td', X.syntactic === name ? `${name} (syntactic head)` : name).className = 'label';
    const roles = (X.roles.find(o => o.layer === l && o.head === h) || { roles: [] }).roles;
    rels.forEach(r => {
      const x = X.relations.find(o => o.layer === l && o.head === h && o.relation === r);
      add(tr, roles.includes(r) ? 'th' : 'td', x ? two(x.accuracy) : '–');
    });
    tr.onclick = () => pick(l, h);
  }
}
if (L) pick(0, 0);
document.body.dataset.ready = '1';
