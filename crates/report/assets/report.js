// headlab's report page: loss curves, head scores through training, every head's attention
// map at the step the slider picks, the final head table, a sample and the config. The data
// is the JSON in #report-data; every element is built with createElement and textContent, so
// no string from the data is ever read as markup or code.
'use strict';

const D = JSON.parse(document.getElementById('report-data').textContent);
const $ = id => document.getElementById(id);
const T = D.probe.length, NH = D.n_heads, NHEADS = D.n_layers * D.n_heads;
const STEPS = D.tracked.map(p => p.step);
const HAVE_MAPS = T > 0 && NHEADS > 0 && D.tracked.some(p => typeof p.maps === 'string');
const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const PX = Math.max(1, Math.floor(200 / Math.max(T, 1)));   // map cell size in pixels
const NOT_TOP = new Set(['mean_distance', 'entropy']);       // not "what the head does" scores
const S = { k: Math.max(0, STEPS.length - 1), layer: 0, head: 0, hover: -1, timer: 0 };
const cache = new Map();                                     // step index -> Uint8Array

// Creates an element with a class and text (text only ever goes in as textContent).
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// A number with `d` decimals, or an en dash for null / not a finite number.
const fmt = (v, d = 3) => (typeof v === 'number' && Number.isFinite(v) ? v.toFixed(d) : '–');
const nice = name => name.replace(/_/g, ' ');
const headName = idx => `${Math.floor(idx / NH)}.${idx % NH}`;
const headColor = idx => PALETTE[idx % PALETTE.length];
const headDash = idx => (Math.floor(idx / PALETTE.length) % 2 ? [6, 3] : []);
const selIdx = () => S.layer * NH + S.head;
const TABLE = Array.isArray(D.table) ? D.table : null;
const tableRow = (l, h) => (TABLE || []).find(r => r.layer === l && r.head === h);
const finitePts = pts => (pts || []).filter(p => Number.isFinite(p[0]) && Number.isFinite(p[1]));

// Adds a line to the notes at the top of the page.
function addNote(text) { $('notes').appendChild(el('li', '', text)); }

// White to dark blue by weight in [0, 1] (square root, as in the PNG maps): [r, g, b].
function shadeRGB(w) {
  const s = Math.sqrt(Math.min(1, Math.max(0, w)));
  return [255 - 247 * s | 0, 255 - 207 * s | 0, 255 - 148 * s | 0];
}
const LUT = Array.from({ length: 256 }, (_, b) => shadeRGB(b / 255));

// All heads' u8 maps at tracked step k (null if none were kept): decoded from base64 on
// first use, then cached.
function mapsAt(k) {
  if (cache.has(k)) return cache.get(k);
  const want = NHEADS * T * T, b64 = D.tracked[k].maps;
  let out = null;
  if (typeof b64 === 'string') {
    out = new Uint8Array(want);
    try {
      const bin = atob(b64);
      if (bin.length !== want) addNote(`the maps at step ${STEPS[k]} have ${bin.length} bytes, not ${want}`);
      for (let n = 0; n < Math.min(want, bin.length); n++) out[n] = bin.charCodeAt(n);
    } catch (e) {
      addNote(`the maps at step ${STEPS[k]} could not be decoded`);
    }
  }
  cache.set(k, out);
  return out;
}

// One head's T x T map (row = query, column = key) at tracked step k, or null.
const headMap = (k, idx) => mapsAt(k) && mapsAt(k).subarray(idx * T * T, (idx + 1) * T * T);

const scratch = document.createElement('canvas');            // T x T, one pixel per cell
scratch.width = scratch.height = Math.max(T, 1);

// Draws head idx's map at the current step on its canvas, outlines the hovered query row,
// and records the step and a digest of the map's bytes on the canvas (every row sums to
// about 255, so a plain sum would hardly see a map change).
function drawMap(cv, idx) {
  const a = headMap(S.k, idx), g = cv.getContext('2d');
  let digest = 0;
  if (!a) {                                 // no map kept at this step
    g.fillStyle = '#f0f0f0'; g.fillRect(0, 0, cv.width, cv.height);
    g.fillStyle = '#777'; g.font = '12px system-ui, sans-serif'; g.textAlign = 'center';
    g.fillText('no map at this step', cv.width / 2, cv.height / 2);
  } else {
    const sg = scratch.getContext('2d'), img = sg.createImageData(T, T);
    for (let n = 0; n < a.length; n++) {
      const c = LUT[a[n]];
      digest = (Math.imul(digest, 31) + a[n]) | 0;
      img.data[4 * n] = c[0]; img.data[4 * n + 1] = c[1]; img.data[4 * n + 2] = c[2]; img.data[4 * n + 3] = 255;
    }
    sg.putImageData(img, 0, 0);
    g.imageSmoothingEnabled = false;
    g.drawImage(scratch, 0, 0, T * PX, T * PX);
    if (S.hover >= 0) {
      g.strokeStyle = '#d62728'; g.lineWidth = 2;
      g.strokeRect(1, S.hover * PX - 1, T * PX - 2, PX + 2);
    }
  }
  cv.dataset.step = STEPS[S.k];
  cv.dataset.digest = digest;
}

// The caption's score of head idx at the current step: its highest pattern score, or its
// mean distance and entropy when no pattern score reaches 0.3.
function topScore(idx) {
  const sc = D.tracked[S.k].scores[idx] || [], at = n => sc[D.score_names.indexOf(n)];
  let best = -1;
  D.score_names.forEach((n, s) => {
    if (!NOT_TOP.has(n) && Number.isFinite(sc[s]) && (best < 0 || sc[s] > sc[best])) best = s;
  });
  if (best >= 0 && sc[best] >= 0.3) return `${nice(D.score_names[best])} ${fmt(sc[best], 2)}`;
  return `mean distance ${fmt(at('mean_distance'), 1)} · entropy ${fmt(at('entropy'), 2)}`;
}

// Redraws every map panel and its top-score caption for the current step.
function drawMaps() {
  document.querySelectorAll('#grid .panel').forEach(p => {
    const idx = +p.dataset.layer * NH + +p.dataset.head;
    drawMap(p.querySelector('canvas.map'), idx);
    p.querySelector('.top-score').textContent = topScore(idx) || '\u00a0';
  });
}

// Builds the grid: one panel per head, a row per layer; clicking a panel selects its head.
function buildGrid() {
  const grid = $('grid');
  for (let l = 0; l < D.n_layers; l++) {
    grid.appendChild(el('div', 'grid-layer', `layer ${l}`));
    for (let h = 0; h < NH; h++) {
      const p = el('div', 'panel'), cap = el('div', 'cap', `${l}.${h}`), row = tableRow(l, h);
      p.dataset.layer = l; p.dataset.head = h;
      p.style.width = `${Math.max(T * PX, 222) + 2}px`;
      if (row && row.label) cap.appendChild(el('span', 'label', row.label));
      const cv = el('canvas', 'map');
      cv.width = cv.height = T * PX;
      cv.title = `${l}.${h}: query down, key across`;
      p.append(cap, el('div', 'top-score'), cv);
      p.addEventListener('click', () => select(l, h));
      grid.appendChild(p);
    }
  }
}

// Builds the token strip; hovering a token shows where the selected head looks from it.
function buildTokens() {
  const box = $('tokens');
  D.probe.forEach((t, i) => {
    const s = el('span', 'tok', t);
    s.dataset.i = i;
    if (/^\s+$/.test(t)) {                  // show whitespace; textContent stays the token
      s.classList.add('ws');
      s.dataset.show = t.replace(/ /g, '\u2423').replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/\r/g, '\u240d');
    }
    s.addEventListener('mouseenter', () => hover(i));
    s.addEventListener('mouseleave', () => hover(-1));
    box.appendChild(s);
  });
}

// Shades the tokens by the selected head's weights from the hovered query (or clears them).
function shadeTokens() {
  const a = S.hover >= 0 && HAVE_MAPS ? headMap(S.k, selIdx()) : null, i = S.hover, on = !!a;
  document.querySelectorAll('#tokens .tok').forEach((e, j) => {
    const b = on ? a[i * T + j] : 0, c = LUT[b];
    e.style.background = on ? `rgb(${c[0]},${c[1]},${c[2]})` : '';
    e.classList.toggle('q', on && j === i);
    e.classList.toggle('fut', on && j > i);
    e.classList.toggle('dark', on && b > 100);
    e.title = on ? `${(b / 2.55).toFixed(1)}%` : '';
  });
  $('hover-info').textContent = on ? hoverText(i, a) : '\u00a0';
}

// One line on the hovered query: the selected head's three largest weights from it.
function hoverText(i, a) {
  const keys = [...Array(i + 1).keys()].sort((x, y) => a[i * T + y] - a[i * T + x]).slice(0, 3);
  const parts = keys.map(j => `${JSON.stringify(D.probe[j])} (${j}) ${(a[i * T + j] / 2.55).toFixed(1)}%`);
  return `${headName(selIdx())} at step ${STEPS[S.k]}, query ${JSON.stringify(D.probe[i])} (${i}) looks at: ${parts.join(', ')}`;
}

// Hovers query token i (-1: none): shades the tokens and outlines row i in every map.
function hover(i) {
  S.hover = i;
  $('tokens').dataset.hover = i;
  shadeTokens();
  if (HAVE_MAPS) drawMaps();
}

// Tick values for [lo, hi], about n of them, on 1-2-2.5-5 steps; returns {lo, hi, step, ticks}.
function axis(lo, hi, n, snap) {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / Math.max(1, n), mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw * (1 - 1e-9));
  if (snap) { lo = Math.floor(lo / step + 1e-9) * step; hi = Math.ceil(hi / step - 1e-9) * step; }
  const ticks = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return { lo, hi, step, ticks };
}

// A tick label: exponent form for tiny values (learning rates), else just enough decimals.
function tickLabel(v, step) {
  if (v === 0) return '0';
  if (Math.abs(v) < 0.01) return v.toExponential(1).replace('.0e', 'e');
  let d = 0;
  while (d < 6 && Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) > 1e-6) d++;
  return v.toFixed(d);
}

// Sizes a canvas to its CSS box at the screen's pixel ratio; returns its context and size.
function fitCanvas(cv) {
  const r = window.devicePixelRatio || 1, w = cv.clientWidth || 600, h = cv.clientHeight || 200;
  if (cv.width !== Math.round(w * r) || cv.height !== Math.round(h * r)) {
    cv.width = Math.round(w * r); cv.height = Math.round(h * r);
  }
  const g = cv.getContext('2d');
  g.setTransform(r, 0, 0, r, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}

// Draws a line chart. spec: {title, ylabel, x: [lo, hi], y: [lo, hi], log?, right?: {label, y},
// series: [{pts, color, width, dash, alpha, right, mark}], legend?: [{name, color, dash}]};
// `log` puts the left axis on a log scale (points at or below 0 are left out); `marker` is the
// step of the vertical marker (null: none), also written to data-marker-step.
function drawChart(cv, spec, marker) {
  const { g, w, h } = fitCanvas(cv), P = { l: 54, r: spec.right ? 62 : 16, t: 26, b: 38 };
  const head = fitTitle(g, spec.title, w - P.r - P.l - legendWidth(g, spec.legend) - 10);
  P.t += 15 * (head.lines.length - 1);
  const pw = w - P.l - P.r, ph = h - P.t - P.b;
  const L = spec.log ? v => Math.log10(v) : v => v;
  const ax = axis(spec.x[0], spec.x[1], Math.max(2, Math.floor(pw / 80)), false);
  const ay = axis(L(spec.y[0]), L(spec.y[1]), Math.max(2, Math.floor(ph / 32)), !spec.log);
  const ar = spec.right ? axis(spec.right.y[0], spec.right.y[1], ay.ticks.length - 1, true) : null;
  const X = v => P.l + (v - ax.lo) / (ax.hi - ax.lo) * pw;
  const Y = (v, a) => P.t + ph - (v - a.lo) / (a.hi - a.lo) * ph;
  g.font = '12px system-ui, sans-serif';
  g.lineWidth = 1;
  g.fillStyle = '#555';
  g.textAlign = 'right'; g.textBaseline = 'middle';
  for (const v of ay.ticks) {
    hline(g, P.l, P.l + pw, Y(v, ay), '#eee');
    g.fillText(spec.log ? String(+(10 ** v).toPrecision(2)) : tickLabel(v, ay.step), P.l - 6, Y(v, ay));
  }
  g.textAlign = 'left';
  for (const v of ar ? ar.ticks : []) g.fillText(tickLabel(v, ar.step), P.l + pw + 6, Y(v, ar));
  g.textAlign = 'center'; g.textBaseline = 'top';
  for (const v of ax.ticks) { vline(g, X(v), P.t + ph, P.t + ph + 4, '#999'); g.fillText(tickLabel(v, ax.step), X(v), P.t + ph + 6); }
  g.fillText(spec.xlabel || 'step', P.l + pw / 2, P.t + ph + 21);
  rotated(g, spec.ylabel, 12, P.t + ph / 2);
  if (spec.right) rotated(g, spec.right.label, w - 10, P.t + ph / 2);
  g.strokeStyle = '#bbb'; g.strokeRect(P.l + 0.5, P.t + 0.5, pw, ph);
  g.save();
  g.beginPath(); g.rect(P.l, P.t, pw, ph); g.clip();
  for (const s of spec.series) {
    if (s.right || !spec.log) { drawSeries(g, s, X, v => Y(v, s.right ? ar : ay)); continue; }
    const pos = p => p && p[1] > 0;
    drawSeries(g, { ...s, pts: (s.pts || []).filter(pos), mark: pos(s.mark) && s.mark }, X, v => Y(L(v), ay));
  }
  g.restore();
  g.fillStyle = '#222'; g.font = head.font; g.textAlign = 'left'; g.textBaseline = 'alphabetic';
  head.lines.forEach((line, n) => g.fillText(line, P.l, 17 + 15 * n));
  if (spec.legend) legend(g, spec.legend, w - P.r, 17);
  if (marker === null || marker === undefined) { delete cv.dataset.markerStep; return; }
  g.lineWidth = 1.5; g.setLineDash([4, 3]); vline(g, X(marker), P.t, P.t + ph, '#d62728'); g.setLineDash([]);
  cv.dataset.markerStep = marker;
}

// The title's font and lines so that it fits in `room` pixels (left of the legend): 13px bold,
// smaller down to 11px, then two lines split at its readout's dash, then as small as it takes;
// a title is never cut at the canvas's edge or drawn under the legend.
function fitTitle(g, title, room) {
  const font = px => `600 ${px}px system-ui, sans-serif`;
  const fits = (lines, px) => { g.font = font(px); return lines.every(l => g.measureText(l).width <= room); };
  for (const px of [13, 12, 11]) if (fits([title], px)) return { font: font(px), lines: [title] };
  const cut = title.indexOf(' — ');
  const lines = cut > 0 ? [title.slice(0, cut), title.slice(cut + 1)] : [title];
  for (const px of [12, 11, 10]) if (fits(lines, px)) return { font: font(px), lines };
  g.font = font(10);
  const widest = Math.max(...lines.map(l => g.measureText(l).width));
  return { font: font(Math.max(6, Math.floor(10 * room / widest))), lines };
}

// The width legend() takes for `entries` (0 without a legend).
function legendWidth(g, entries) {
  if (!entries) return 0;
  g.font = '12px system-ui, sans-serif';
  return entries.reduce((sum, e) => sum + g.measureText(e.name).width + 36, 0);
}

// Draws one series as a polyline (a dot if it has a single point), and a dot at s.mark.
function drawSeries(g, s, X, Y) {
  const pts = finitePts(s.pts);
  g.globalAlpha = s.alpha || 1;
  g.strokeStyle = g.fillStyle = s.color; g.lineWidth = s.width || 1.5; g.setLineDash(s.dash || []);
  g.beginPath();
  pts.forEach(([x, y], n) => (n ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
  g.stroke(); g.setLineDash([]);
  const dots = pts.length === 1 ? pts : [];
  if (s.mark && Number.isFinite(s.mark[1])) dots.push(s.mark);
  for (const [x, y] of dots) { g.beginPath(); g.arc(X(x), Y(y), (s.width || 1.5) + 1.5, 0, 2 * Math.PI); g.fill(); }
  g.globalAlpha = 1;
}

// Line helpers: horizontal and vertical one-pixel lines, and text rotated to read upwards.
function hline(g, x0, x1, y, c) { g.strokeStyle = c; g.beginPath(); g.moveTo(x0, Math.round(y) + 0.5); g.lineTo(x1, Math.round(y) + 0.5); g.stroke(); }
function vline(g, x, y0, y1, c) { g.strokeStyle = c; g.beginPath(); g.moveTo(Math.round(x) + 0.5, y0); g.lineTo(Math.round(x) + 0.5, y1); g.stroke(); }
function rotated(g, text, x, y) {
  g.save(); g.translate(x, y); g.rotate(-Math.PI / 2); g.textAlign = 'center'; g.textBaseline = 'middle';
  g.fillStyle = '#555'; g.fillText(text, 0, 0); g.restore();
}

// Draws a legend right-aligned at (x, y): a short line in each entry's colour, then its name.
function legend(g, entries, x, y) {
  g.font = '12px system-ui, sans-serif'; g.textAlign = 'left';
  for (const e of [...entries].reverse()) {
    x -= g.measureText(e.name).width;
    g.fillStyle = '#333'; g.fillText(e.name, x, y);
    x -= 24;
    g.lineWidth = 2; g.setLineDash(e.dash || []); hline(g, x, x + 18, y - 4, e.color); g.setLineDash([]);
    x -= 12;
  }
}

// The step range every chart shares: all evaluations and tracked steps.
function stepRange() {
  const xs = [...finitePts(D.losses.batches), ...finitePts(D.losses.train), ...finitePts(D.losses.val), ...finitePts(D.lr)].map(p => p[0]).concat(STEPS);
  return xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
}

// The last point of pts at or before step x.
const lastAt = (pts, x) => finitePts(pts).filter(p => p[0] <= x).pop();

// Draws the loss chart: the loss of every training batch (thin), train and val loss at each
// evaluation (left axis; log scale when #loss-log is checked), learning rate (right, dashed).
// The canvas's data-series names what was drawn, with point counts; data-scale the y scale.
function drawLoss() {
  const cv = $('loss-chart'), tr = D.losses.train, va = D.losses.val, ba = D.losses.batches || [];
  const marker = STEPS.length ? STEPS[S.k] : null, log = $('loss-log').checked;
  const ys = [...finitePts(ba), ...finitePts(tr), ...finitePts(va)].map(p => p[1]).filter(y => !log || y > 0);
  const lrs = finitePts(D.lr).map(p => p[1]);
  const at = marker === null ? [] : [['train', lastAt(tr, marker)], ['val', lastAt(va, marker)]].filter(e => e[1]);
  const readout = at.map(([n, p]) => `${n} ${fmt(p[1])}`).join(' · ');
  cv.hidden = !ys.length;
  $('loss-missing').hidden = !cv.hidden;
  if (cv.hidden) return;
  const series = [
    { name: 'lr', pts: D.lr, color: '#888', width: 1.25, dash: [5, 4], right: true },
    { name: 'batch', pts: ba, color: '#9ecae1', width: 1 },
    { name: 'train', pts: tr, color: '#1f77b4', width: 2, mark: at.length && lastAt(tr, marker) },
    { name: 'val', pts: va, color: '#ff7f0e', width: 2, mark: at.length && lastAt(va, marker) },
  ].filter(s => finitePts(s.pts).length);
  drawChart(cv, {
    title: `loss${readout ? ` — ${readout} at step ${marker}` : ''}`,
    ylabel: log ? 'loss (log scale)' : 'loss', x: stepRange(),
    y: log ? [Math.min(...ys), Math.max(...ys)] : [0, Math.max(...ys)], log,
    right: lrs.length ? { label: 'learning rate', y: [0, Math.max(...lrs)] } : null,
    series,
    legend: (ba.length ? [{ name: 'batch', color: '#9ecae1' }] : []).concat(
      [{ name: 'train', color: '#1f77b4' }, { name: 'val', color: '#ff7f0e' }],
      lrs.length ? [{ name: 'lr (right)', color: '#888', dash: [5, 4] }] : []),
  }, marker);
  cv.dataset.series = series.map(s => `${s.name}:${finitePts(s.pts).length}`).join(',');
  cv.dataset.scale = log ? 'log' : 'linear';
}

// Draws a grammar run's chart: the shares of sampled sentences that are well-formed and
// that agree, at each evaluation (hidden for other runs).
function drawGrammar() {
  const cv = $('grammar-chart'), g = D.grammar || [], marker = STEPS.length ? STEPS[S.k] : null;
  cv.hidden = !g.length;
  if (cv.hidden) return;
  const formed = g.map(p => [p[0], p[1]]), agreeing = g.map(p => [p[0], p[2]]);
  const at = marker === null ? null : lastAt(formed, marker), at2 = marker === null ? null : lastAt(agreeing, marker);
  // Whole percentages with halves rounded up, as the terminal prints them (grammar::percent).
  const pct = v => `${Math.round(100 * v)}%`;
  const readout = at && at2 ? ` — ${pct(at[1])} well-formed, ${pct(at2[1])} agreeing at step ${at[0]}` : '';
  drawChart(cv, {
    title: `sampled sentences${readout}`,
    ylabel: 'share', x: stepRange(), y: [0, 1],
    series: [
      { pts: formed, color: '#2ca02c', width: 2, mark: at },
      { pts: agreeing, color: '#9467bd', width: 2, mark: at2 },
    ],
    legend: [{ name: 'well-formed', color: '#2ca02c' }, { name: 'agreeing', color: '#9467bd' }],
  }, marker);
}

// Draws the in-context-learning score (icl_history.csv): the loss at the context's last 8
// positions minus the loss at positions 2-9, with both losses, on the loss chart's step axis.
function drawIcl() {
  const cv = $('icl-chart'), g = D.icl || [], marker = STEPS.length ? STEPS[S.k] : null;
  cv.hidden = !g.length;
  $('icl-caption').hidden = cv.hidden;
  if (cv.hidden) return;
  const score = g.map(p => [p[0], p[2] - p[1]]), early = g.map(p => [p[0], p[1]]), late = g.map(p => [p[0], p[2]]);
  const at = marker === null ? null : lastAt(score, marker);
  const ys = finitePts([...score, ...early, ...late]).map(p => p[1]);
  const [x0, x1] = stepRange();
  drawChart(cv, {
    title: `in-context learning: late minus early loss${at ? ` — ${fmt(at[1])} at step ${at[0]}` : ''}`,
    ylabel: 'nats', x: [x0, x1], y: [Math.min(0, ...ys), Math.max(0.1, ...ys)],
    series: [
      { pts: [[x0, 0], [x1, 0]], color: '#888', width: 1, dash: [5, 4] },
      { pts: early, color: '#ff7f0e', width: 1.5, alpha: 0.8 },
      { pts: late, color: '#2ca02c', width: 1.5, alpha: 0.8 },
      { pts: score, color: '#222', width: 2.5, mark: at },
    ],
    legend: [{ name: 'late - early', color: '#222' }, { name: 'positions 2-9', color: '#ff7f0e' }, { name: 'last 8', color: '#2ca02c' }],
  }, marker);
}

// One series per head through the tracked steps, `value(point, head index)` at each; the
// selected head drawn bold and last (on top), a dot at the slider's step.
function headSeries(value) {
  const sel = selIdx(), series = [];
  for (let idx = 0; idx < NHEADS; idx++) {
    const pts = D.tracked.map(p => [p.step, value(p, idx)]);
    series.push({ pts, color: headColor(idx), dash: headDash(idx), width: idx === sel ? 3 : 1.5,
      alpha: idx === sel ? 1 : 0.6, mark: pts[S.k] });
  }
  series.push(series.splice(sel, 1)[0]);
  return series;
}

// Draws one score's chart: a line per head, the selected head drawn bold, dots at the marker.
function drawScore(cv, s) {
  const name = D.score_names[s], sel = selIdx(), step = STEPS[S.k];
  const series = headSeries((p, idx) => (p.scores[idx] || [])[s]);
  let ymax = 1;
  series.forEach(x => finitePts(x.pts).forEach(p => { ymax = Math.max(ymax, p[1]); }));
  const v = (D.tracked[S.k].scores[sel] || [])[s];
  drawChart(cv, {
    title: `${nice(name)} — ${headName(sel)} ${fmt(v)} at step ${step}`,
    ylabel: name === 'mean_distance' ? 'tokens' : 'score',
    x: stepRange(), y: [0, name === 'mean_distance' ? ymax : 1], series,
  }, step);
}

// Draws the chart of the loss on the repeated half of the probe, with chance (ln V) dashed.
function drawRepeat(cv) {
  const pts = D.tracked.map(p => [p.step, p.repeat_loss]), ys = finitePts(pts).map(p => p[1]);
  const chance = D.vocab_size > 0 ? Math.log(D.vocab_size) : null, [x0, x1] = stepRange();
  const series = [{ pts, color: '#222', width: 2, mark: pts[S.k] }];
  if (chance !== null) series.unshift({ pts: [[x0, chance], [x1, chance]], color: '#888', width: 1.25, dash: [5, 4] });
  drawChart(cv, {
    title: `loss on the repeated half — ${fmt(D.tracked[S.k].repeat_loss)} at step ${STEPS[S.k]}`,
    ylabel: 'loss', x: [x0, x1], y: [0, Math.max(ys.length ? Math.max(...ys) : 1, chance || 0)],
    series,
  }, STEPS[S.k]);
}

// Draws every head's gradient norm through training (the gradient of the step that led to
// each tracked step), on a log scale when it spans more than a factor of 100.
function drawGradNorm(cv) {
  const sel = selIdx(), step = STEPS[S.k];
  const series = headSeries((p, idx) => (p.grad_norms || [])[idx]);
  let ymax = 0;
  series.forEach(x => finitePts(x.pts).forEach(p => { ymax = Math.max(ymax, p[1]); }));
  const v = (D.tracked[S.k].grad_norms || [])[sel];
  drawChart(cv, {
    title: `gradient norm — ${headName(sel)} ${fmt(v, 4)} at step ${step}`,
    ylabel: 'norm', x: stepRange(), y: [0, ymax > 0 ? ymax : 1], series,
  }, step);
}

// Builds the head legend and one chart canvas per score (ids score-<name>, repeat-loss).
function buildScores() {
  for (let idx = 0; idx < NHEADS; idx++) {
    const e = el('span', 'leg'), sw = el('i');
    sw.style.borderTopColor = headColor(idx);
    if (headDash(idx).length) e.classList.add('dash');
    e.append(sw, headName(idx));
    e.dataset.layer = Math.floor(idx / NH); e.dataset.head = idx % NH;
    e.addEventListener('click', () => select(Math.floor(idx / NH), idx % NH));
    $('legend').appendChild(e);
  }
  const box = $('score-charts');
  const chart = (id, caption) => {
    const fig = el('figure', 'probe'), cv = el('canvas', 'chart');
    cv.id = id;
    fig.append(cv, el('figcaption', 'caption', caption));
    box.appendChild(fig);
  };
  D.score_names.forEach(n => chart(`score-${n}`, CAPTIONS[n] || ''));
  chart('repeat-loss', repeatCaption());
  if (HAVE_GRADS) chart('grad-norm', GRAD_CAPTION);
  if (HAVE_COPYING) chart('copying', COPYING_CAPTION);
  if (HAVE_SYNTAX) {
    chart('syntax-subject_mass', SUBJECT_CAPTION);
    RELATIONS.forEach(r => chart(`syntax-${r}`, RELATION_CAPTIONS[r]));
  }
}

// Whether the run tracked syntactic scores (a run on the built-in grammar corpus).
const HAVE_SYNTAX = D.tracked.some(p => Array.isArray(p.syntax));
const RELATIONS = ['subject', 'determiner', 'antecedent', 'object', 'preposition'];
const SUBJECT_CAPTION = 'Where the next token writes the verb\'s number (with word tokens, the word before the verb; with characters, the last letter of its stem, before "s" or not), each head\'s attention on the verb\'s subject noun (with characters, its letters and the space after it), over the verbs that have a nearer noun (the attractor) between subject and verb. A head that rises here carries the subject\'s number to the verb.';
const RELATION_CAPTIONS = {
  subject: 'Share of verbs whose most-attended word (read at the verb, or with characters at the space after it) is the head noun of their subject; dashed: the best "attend k words back" rule on the same verbs.',
  determiner: 'Share of nouns whose most-attended word is their own determiner ("the", "a", "some"); dashed: the best fixed-offset rule.',
  antecedent: 'Share of relative-clause verbs whose most-attended word is the noun before "that"; dashed: the best fixed-offset rule.',
  object: 'Share of object nouns whose most-attended word is their verb; dashed: the best fixed-offset rule.',
  preposition: 'Share of a prepositional phrase\'s nouns whose most-attended word is the preposition; dashed: the best fixed-offset rule.',
};

// Draws one syntactic value per head through training, the selected head bold; `base`, when
// given, is the value drawn dashed in grey (a relation's fixed-offset baseline).
function drawSyntax(cv, name, title, ylabel, base) {
  const s = D.syntax_names.indexOf(name), sel = selIdx(), step = STEPS[S.k];
  const at = (p, idx, i) => (Array.isArray(p.syntax) ? p.syntax[idx] || [] : [])[i];
  const series = headSeries((p, idx) => at(p, idx, s));
  if (base) {
    const b = D.syntax_names.indexOf(base);
    series.unshift({ pts: D.tracked.map(p => [p.step, at(p, 0, b)]), color: '#888', width: 1.25, dash: [5, 4] });
  }
  drawChart(cv, {
    title: `${title} — ${headName(sel)} ${fmt(at(D.tracked[S.k], sel, s))} at step ${step}`,
    ylabel, x: stepRange(), y: [0, 1], series,
  }, step);
}

// Whether the run recorded per-head gradient norms (runs made before it did have none).
const HAVE_GRADS = D.tracked.some(p => (p.grad_norms || []).some(Number.isFinite));
const GRAD_CAPTION = 'Each head\'s gradient norm: how hard the step before each tracked step pulled on the head\'s own weights (its W_Q, W_K, W_V columns and W_O rows). Heads that start alike but are pulled differently grow apart; one whose norm falls to near 0 has settled.';

// Whether the run recorded copying scores (runs made before it did have none).
const HAVE_COPYING = D.tracked.some(p => (p.copying || []).some(Number.isFinite));
const COPYING_CAPTION = 'Each head\'s copying score, from its weights: the eigenvalues of its full OV circuit W_E W_V W_O W_U (LayerNorm weights folded in), as Re(sum) / sum of |each|. Near +1 the head raises the logit of the token it attends to (a copier, such as an induction head\'s output); near -1 it lowers it (a suppressor); near 0 it writes something else.';

// Draws every head's copying score through training, from -1 to 1.
function drawCopying(cv) {
  const sel = selIdx(), step = STEPS[S.k];
  const series = headSeries((p, idx) => (p.copying || [])[idx]);
  series.unshift({ pts: stepRange().map(x => [x, 0]), color: '#888', width: 1, dash: [5, 4] });
  drawChart(cv, {
    title: `copying score — ${headName(sel)} ${fmt((D.tracked[S.k].copying || [])[sel])} at step ${step}`,
    ylabel: 'score', x: stepRange(), y: [-1, 1], series,
  }, step);
}

// What each probe chart measures and what a rise or fall means, one line each.
const CAPTIONS = {
  previous_token: 'Attention from each token to the one just before it: near 1, the head reads the previous token (the first half of an induction circuit).',
  induction: 'On random tokens repeated once: attention from a token of the second half to the token that followed its earlier copy. It jumps when an induction head forms.',
  duplicate_token: 'On the same repeated tokens: attention to the earlier copy of the current token itself. A rise means the head finds repeats.',
  first_token: 'Attention to the first token of the window. High values usually mean the head parks its attention there (a sink) when it has nothing to read.',
  mean_distance: 'How far back the head looks, in tokens, weighted by attention: small for local heads, large for long-range ones.',
  entropy: 'How spread the attention is, normalised: 0 looks at one token, 1 spreads evenly over every earlier one. A fall means the head has specialised.',
};

// The repeated-half chart's caption, with chance (a uniform guess) for this vocabulary.
function repeatCaption() {
  const chance = D.vocab_size > 0 ? ` Chance is ln ${D.vocab_size} = ${fmt(Math.log(D.vocab_size), 2)} (dashed).` : '';
  return 'Loss on the second half of random tokens repeated once. It falls below chance only when the model copies from the first half (an induction circuit); a model of text without repeats grows more confident in its own corpus and can rise above chance, which is not a failure.' + chance;
}

// Redraws every chart (loss, scores, repeated-half loss) for the current step and head.
function drawCharts() {
  drawLoss();
  drawGrammar();
  drawIcl();
  drawPruning();
  if (!STEPS.length) return;
  D.score_names.forEach((n, s) => drawScore($(`score-${n}`), s));
  drawRepeat($('repeat-loss'));
  if (HAVE_GRADS) drawGradNorm($('grad-norm'));
  if (HAVE_COPYING) drawCopying($('copying'));
  if (HAVE_SYNTAX) {
    drawSyntax($('syntax-subject_mass'), 'subject_mass', 'attention on the subject at the verb\'s number', 'attention');
    RELATIONS.forEach(r => drawSyntax($(`syntax-${r}`), r, `${r} accuracy`, 'accuracy', `${r}_baseline`));
  }
}

// The syntactic heads at the end (heads/syntax.json): each head's score on every relation
// against the fixed-offset baseline, its attention on the subject and the attractor where the
// verb writes its number, and the forced-choice agreement with heads zeroed.
function buildSyntax() {
  const X = D.syntax;
  if (!X || !Array.isArray(X.relations)) return;
  $('syntax-section').hidden = false;
  $('syntax-info').append(`Measured on the run's val split, its first ${X.sentences} sentences`,
    ` (${X.chars} characters). A head's accuracy on a relation: how often the word it attends to`,
    ' most is the related word; a role (bold) needs ', el('strong', '', fmt(X.role_margin, 2)),
    ` over the best fixed-offset rule and at least ${X.role_min_arcs} arcs. Labels are properties`,
    ' of a head on this text, not of the head alone.');
  $('syntax-line').textContent = X.line || '';
  // The head that beats its fixed-offset rule by the most, and what zeroing it alone does.
  if (X.syntactic_line) $('syntax-syntactic').textContent = X.syntactic_line;
  const rels = RELATIONS.filter(r => X.relations.some(x => x.relation === r));
  const tbl = $('syntax-table'), hr = tbl.createTHead().insertRow();
  ['head', 'subject mass', 'attractor mass', ...rels].forEach((c, n) => hr.appendChild(el('th', n ? '' : 'txt', c)));
  const body = tbl.createTBody(), base = body.insertRow();
  base.append(el('td', 'txt', 'fixed-offset baseline'), el('td', '', ''), el('td', '', ''));
  rels.forEach(r => {
    const b = X.relations.find(x => x.relation === r).baseline;
    base.appendChild(el('td', '', `${fmt(b.accuracy, 2)} (${b.offset} back)`));
  });
  for (const a of X.agreement) {
    const tr = body.insertRow(), name = `${a.layer}.${a.head}`;
    tr.dataset.layer = a.layer; tr.dataset.head = a.head;
    const tracked = (X.tracked || []).includes(name), syntactic = X.syntactic === name;
    if (syntactic) tr.classList.add('syntactic');
    const what = [syntactic && 'syntactic head', tracked && 'subject tracker'].filter(Boolean).join(', ');
    tr.append(el('td', 'txt', `${a.layer}.${a.head}${what ? ` (${what})` : ''}`),
      el('td', '', fmt(a.subject_mass, 2)), el('td', '', fmt(a.attractor_mass, 2)));
    const roles = (X.roles.find(o => o.layer === a.layer && o.head === a.head) || { roles: [] }).roles;
    rels.forEach(r => {
      const x = X.relations.find(o => o.layer === a.layer && o.head === a.head && o.relation === r);
      tr.appendChild(el(roles.includes(r) ? 'th' : 'td', '', fmt(x ? x.accuracy : NaN, 2)));
    });
    tr.addEventListener('click', () => select(a.layer, a.head));
  }
  const sw = $('syntax-sweep'), sh = sw.createTHead().insertRow();
  // The forced choice also by what stands between subject and verb (agreement.csv's split).
  const CONSTRUCTIONS = [['prepositional', 'across a phrase'], ['relative', 'across a clause'], ['nothing', 'nothing between']];
  ['heads zeroed', 'kind', 'verbs', 'agreement (forced choice)', ...CONSTRUCTIONS.map(c => c[1]), 'mean p(right form)', 'sampled sentences'].forEach((c, n) => sh.appendChild(el('th', n < 2 ? 'txt' : '', c)));
  const sb = sw.createTBody();
  const pct = g => (g && g.well_formed > 0
    ? `${Math.round(100 * g.well_formed)}% well-formed, ${Math.round(100 * g.agreeing / g.well_formed)}% of those agree` : '–');
  for (const r of X.sweep || []) {
    const tr = sb.insertRow();
    const by = c => (r.by_construction || []).find(b => b.construction === c[0]);
    const cell = c => { const b = by(c); return el('td', '', b && b.n ? `${fmt(b.accuracy, 2)} (${b.n})` : '–'); };
    tr.append(el('td', 'txt', r.ablated), el('td', 'txt', r.kind), el('td', '', r.n),
      el('td', '', fmt(r.accuracy, 2)), ...CONSTRUCTIONS.map(cell), el('td', '', fmt(r.mean_p_right, 2)),
      el('td', '', pct(r.sampled)));
  }
}

// `headlab prune`'s curves (prune/prune.json): one line per order against heads removed, the
// importance order blue, the reverse red, random orders thin and grey.
const PRUNE_COLORS = { importance: '#1f77b4', reverse: '#d62728' };
const HAVE_PRUNING = Array.isArray(D.pruning) && D.pruning.length > 0;

function buildPruning() {
  if (!HAVE_PRUNING) return;
  $('prune-section').hidden = false;
  if (!D.pruning.some(c => c.steps.some(s => Number.isFinite(s.agreement)))) $('prune-agreement-figure').hidden = true;
}

function drawPruning() {
  if (!HAVE_PRUNING) return;
  const n = Math.max(1, ...D.pruning.map(c => c.steps.length - 1));
  const series = key => D.pruning.map(c => ({
    name: c.order,
    pts: c.steps.map((s, k) => [k, s[key]]),
    color: c.random ? '#999' : PRUNE_COLORS[c.order] || '#2ca02c',
    width: c.random ? 1 : 2,
  }));
  // As the loss chart does: what was drawn, with point counts.
  const mark = (cv, ss) => { cv.dataset.series = ss.map(s => `${s.name}:${finitePts(s.pts).length}`).join(','); };
  const losses = D.pruning.flatMap(c => c.steps.map(s => s.val_loss)).filter(Number.isFinite);
  const lo = Math.min(...losses), hi = Math.max(...losses);
  const loss = series('val_loss');
  drawChart($('prune-loss'), {
    title: 'val loss as heads are removed', ylabel: 'val loss', xlabel: 'heads removed',
    x: [0, n], y: [lo, hi > lo ? hi : lo + 1], series: loss,
  });
  mark($('prune-loss'), loss);
  if (!$('prune-agreement-figure').hidden) {
    const agreement = series('agreement');
    drawChart($('prune-agreement'), {
      title: 'agreement as heads are removed', ylabel: 'forced choice', xlabel: 'heads removed',
      x: [0, n], y: [0, 1], series: agreement,
    });
    mark($('prune-agreement'), agreement);
  }
}

// Builds the final head table (a row per head; click selects), or says how to get one.
function buildTable() {
  if (!TABLE) {
    $('head-table').hidden = true;
    const p = $('table-missing');
    p.hidden = false;
    p.append('No head table yet: run ', el('code', '', 'headlab heads RUN'),
      ' (RUN: this run\'s folder) to measure every head at the last checkpoint (scores, labels,',
      ' ablations), then make this page again.');
    return;
  }
  const cols = [...D.score_names, 'ablation_zero', 'ablation_mean', 'grad_importance', 'copying', 'ov_top1'];
  const tbl = $('head-table'), hr = tbl.createTHead().insertRow();
  // A grammar run's syntactic roles, beside the label, when any head has one.
  const roles = TABLE.some(r => (r.roles || []).length);
  const texts = roles ? ['head', 'label', 'roles'] : ['head', 'label'];
  [...texts, ...cols].forEach((c, n) => hr.appendChild(el('th', n < texts.length ? 'txt' : '', nice(c))));
  const body = tbl.createTBody();
  for (const r of TABLE) {
    const tr = body.insertRow();
    tr.dataset.layer = r.layer; tr.dataset.head = r.head;
    tr.append(el('td', 'txt', `${r.layer}.${r.head}`), el('td', 'txt', r.label || ''));
    if (roles) tr.appendChild(el('td', 'txt', (r.roles || []).join(', ')));
    cols.forEach(c => tr.appendChild(el('td', '', fmt(r[c]))));
    tr.addEventListener('click', () => select(r.layer, r.head));
  }
}

// Blue for activations that restore the clean answer, red for ones that push it away,
// stronger the further from 0 (clamped at +-1).
function patchShade(v) {
  const a = Math.min(1, Math.abs(Number.isFinite(v) ? v : 0));
  const [r, g, b] = v >= 0 ? [33, 102, 172] : [178, 24, 43];
  const mix = c => Math.round(255 + (c - 255) * a);
  return `rgb(${mix(r)},${mix(g)},${mix(b)})`;
}

// Builds the section of `headlab patch`'s results: the prompts, the metric, and per site a
// grid of the share of the clean answer each patch restores (layers down).
function buildPatching() {
  const P = D.patching;
  if (!P || !Array.isArray(P.sweeps)) return;
  $('patch-section').hidden = false;
  const info = $('patch-info');
  info.append('clean ', el('code', '', P.clean_prompt), ', corrupted ', el('code', '', P.corrupted_prompt),
    `; metric ${P.metric} after the last token: ${fmt(P.clean)} clean, ${fmt(P.corrupted)} corrupted.`,
    ' Each cell: the share of the clean answer restored by putting that clean activation into the',
    ' corrupted run (0 nothing, 1 all of it, negative: further from it).');
  if (P.warning) info.append(' ', el('strong', '', `Warning: ${P.warning}.`));
  for (const sw of P.sweeps) {
    const box = $('patch-grids');
    box.appendChild(el('h3', '', sw.site));
    const tbl = el('table', 'patch'), hr = tbl.createTHead().insertRow();
    hr.appendChild(el('th', 'txt', ''));
    (sw.column_labels || []).forEach(c => hr.appendChild(el('th', '', c)));
    const body = tbl.createTBody();
    for (let l = 0; l < sw.layers; l++) {
      const tr = body.insertRow();
      tr.appendChild(el('td', 'txt', `layer ${l}`));
      for (let c = 0; c < sw.columns; c++) {
        const v = sw.restored[l * sw.columns + c];
        const td = el('td', '', fmt(v, 2));
        td.style.background = patchShade(v);
        if (Math.abs(v) > 0.6) td.style.color = '#fff';
        tr.appendChild(td);
      }
    }
    box.appendChild(tbl);
  }
}

// Fills the notes, the sample and the config (all as plain text).
function fillText() {
  (D.notes || []).forEach(addNote);
  if (D.sample === null || D.sample === undefined) {
    $('sample').hidden = true;
    $('sample-section').appendChild(el('p', 'hint', 'This run has no generated sample.'));
  } else $('sample').textContent = D.sample;
  // `headlab report RUN --beside OTHER`: OTHER's model sampled the same way, side by side.
  const b = D.beside;
  if (b) {
    $('beside-column').hidden = false;
    $('sample-title').hidden = false;
    $('beside-title').textContent = b.run;
    $('beside').textContent = b.sample;
    const info = $('sample-info');
    info.hidden = false;
    info.textContent = `Both from the prompt ${JSON.stringify(b.prompt)}, ${b.tokens} tokens at ` +
      `temperature ${b.temperature}, seed ${b.seed}.`;
  }
  $('config').textContent = D.config || '';
}

// Selects head (l, h): outlines its panel, table row and legend entry, bolds its lines.
function select(l, h) {
  S.layer = l; S.head = h;
  const mine = e => +e.dataset.layer === l && +e.dataset.head === h;
  document.querySelectorAll('#grid .panel, #head-table tr[data-layer], #legend .leg').forEach(e => e.classList.toggle('sel', mine(e)));
  const sh = $('selected-head'), row = tableRow(l, h);
  sh.textContent = 'selected head ';
  sh.append(el('b', '', `${l}.${h}`), row && row.label ? ` (${row.label})` : '');
  if (STEPS.length) { drawCharts(); shadeTokens(); }
}

// Moves to tracked step k: label, chart markers, maps, captions and token shading.
function setStep(k) {
  S.k = Math.max(0, Math.min(STEPS.length - 1, k));
  $('step-slider').value = S.k;
  $('step-label').textContent = `step ${STEPS[S.k]}`;
  drawCharts();
  if (HAVE_MAPS) drawMaps();
  shadeTokens();
}

// Starts or stops playing through the steps (from the start if at the end).
function togglePlay() {
  const b = $('play');
  if (S.timer) { clearInterval(S.timer); S.timer = 0; b.textContent = '▶ play'; return; }
  if (S.k >= STEPS.length - 1) setStep(0);
  b.textContent = '❚❚ pause';
  S.timer = setInterval(() => (S.k >= STEPS.length - 1 ? togglePlay() : setStep(S.k + 1)), 450);
}

// Builds the page, draws it at the last tracked step, and marks it ready.
function init() {
  fillText();
  buildTable();
  buildSyntax();
  buildPruning();
  buildPatching();
  if (STEPS.length) {
    const sl = $('step-slider');
    sl.max = STEPS.length - 1;
    sl.addEventListener('input', () => setStep(+sl.value));
    $('play').addEventListener('click', togglePlay);
    buildScores();
    if (HAVE_MAPS) { buildTokens(); buildGrid(); }
    $('maps-missing').hidden = HAVE_MAPS;
    $('maps-hint').hidden = !HAVE_MAPS;
  } else {
    $('controls').classList.add('off');
    $('no-tracking').hidden = false;
    $('hint').hidden = $('selected-head').hidden = true;
    $('scores-section').hidden = $('maps-section').hidden = true;
  }
  $('loss-log').addEventListener('change', drawLoss);
  select(0, 0);
  if (STEPS.length) setStep(S.k); else { drawLoss(); drawGrammar(); drawPruning(); }
  let queued = false;
  window.addEventListener('resize', () => {
    if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; drawCharts(); }); }
  });
  document.body.dataset.ready = '1';
}

init();
