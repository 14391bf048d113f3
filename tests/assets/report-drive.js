// Appended in a <script> just before </body> (after the page's own script): drives the page
// and writes what it saw as JSON into document.body.dataset.test.
(function () {
  var me = document.currentScript;
  if (me) me.setAttribute('data-test', 'drive');
  var out = { ready: document.body.dataset.ready || null, loaded_ms: Math.round(performance.now()) };
  var attr = function (sel, name) { var e = document.querySelector(sel); return e ? e.getAttribute(name) : null; };
  var maps = function () {
    return Array.prototype.map.call(document.querySelectorAll('#grid .panel canvas.map'), function (c) {
      return { step: c.getAttribute('data-step'), digest: Number(c.getAttribute('data-digest')) };
    });
  };
  var state = function () {
    return {
      label: (document.getElementById('step-label') || {}).textContent,
      loss_marker: attr('#loss-chart', 'data-marker-step'),
      score_marker: attr('#score-charts canvas', 'data-marker-step'),
      maps: maps(),
      captions: Array.prototype.map.call(document.querySelectorAll('#grid .panel .top-score'), function (e) { return e.textContent; })
    };
  };
  try {
    var slider = document.getElementById('step-slider');
    out.slider_visible = !!(slider && slider.offsetParent);
    out.slider = { min: slider.min, max: slider.max, initial: slider.value };
    out.initial = state();
    var t0 = performance.now();
    slider.value = slider.min;
    slider.dispatchEvent(new Event('input'));
    out.input_ms = Math.round((performance.now() - t0) * 10) / 10;
    out.first = state();
    slider.value = slider.max;
    slider.dispatchEvent(new Event('input'));
    out.last = state();
    // Every map must be redrawn (its step changes); count those whose bytes changed.
    out.maps_redrawn = out.first.maps.length > 0 && out.first.maps.every(function (m, i) {
      return m.step !== out.last.maps[i].step;
    });
    out.digests_changed = out.first.maps.filter(function (m, i) { return m.digest !== out.last.maps[i].digest; }).length;
    var box = document.getElementById('tokens');
    var toks = document.querySelectorAll('#tokens .tok');
    out.n_tokens = toks.length;
    out.token_text = Array.prototype.map.call(toks, function (t) { return t.textContent; });
    out.hover_before = box.getAttribute('data-hover');
    if (toks.length < 6) throw new Error('fewer than 6 tokens');
    toks[5].dispatchEvent(new Event('mouseenter'));
    out.hover = box.getAttribute('data-hover');
    out.backgrounds = [];
    for (var i = 0; i <= 5; i++) out.backgrounds.push(getComputedStyle(toks[i]).backgroundColor);
    out.hover_maps = maps();
    toks[5].dispatchEvent(new Event('mouseleave'));
    out.hover_after_leave = box.getAttribute('data-hover');
    out.background_after_leave = getComputedStyle(toks[0]).backgroundColor;
    var panel = document.querySelector('#grid .panel[data-layer="0"][data-head="1"]');
    panel.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    out.selected_panels = Array.prototype.map.call(document.querySelectorAll('#grid .panel.sel'), function (p) {
      return p.getAttribute('data-layer') + ',' + p.getAttribute('data-head');
    });
    out.table_rows = document.querySelectorAll('#head-table tr[data-layer]').length;
    out.table_dashes = Array.prototype.filter.call(document.querySelectorAll('#head-table td'), function (td) { return td.textContent === '\u2013'; }).length;
    var loss = function () { return { series: attr('#loss-chart', 'data-series'), scale: attr('#loss-chart', 'data-scale') }; };
    out.loss = loss();
    document.getElementById('loss-log').click();
    out.loss_log = loss();
    document.getElementById('loss-log').click();
    out.loss_back = loss();
    out.probe_captions = Array.prototype.map.call(document.querySelectorAll('#score-charts figure canvas + figcaption'), function (e) { return e.textContent; });
    var ps = document.getElementById('patch-section');
    out.patch = {
      visible: !!(ps && !ps.hidden),
      tables: document.querySelectorAll('#patch-grids table.patch').length,
      cells: document.querySelectorAll('#patch-grids tbody td').length,
      info: (document.getElementById('patch-info') || {}).textContent
    };
    // Nothing runs past the window: the page does not scroll sideways and each patching grid
    // ends inside it (a wide one scrolls within its column); no chart's text is cut or hidden.
    var width = document.documentElement.clientWidth;
    out.layout = {
      width: width,
      page_overflow: document.documentElement.scrollWidth - width,
      patch_past_edge: Array.prototype.filter.call(document.querySelectorAll('#patch-grids table.patch'), function (t) {
        return t.getBoundingClientRect().right > width;
      }).length,
      clipped_text: window.__clippedTexts ? window.__clippedTexts() : ['no guard']
    };
    out.sample = (document.getElementById('sample') || {}).textContent;
    var bc = document.getElementById('beside-column');
    out.beside = {
      visible: !!(bc && !bc.hidden),
      title: (document.getElementById('beside-title') || {}).textContent,
      text: (document.getElementById('beside') || {}).textContent,
      info: (document.getElementById('sample-info') || {}).textContent
    };
    out.config_tail = ((document.getElementById('config') || {}).textContent || '').slice(-200);
  } catch (e) {
    out.exception = String(e && e.stack || e);
  }
  out.pwned = typeof window.__pwned;
  out.imgs = document.getElementsByTagName('img').length;
  var scripts = document.getElementsByTagName('script');
  out.scripts_total = scripts.length;
  out.page_scripts = Array.prototype.filter.call(scripts, function (s) { return !s.hasAttribute('data-test'); }).map(function (s) {
    return (s.id || '') + '|' + (s.type || '');
  });
  var walker = document.createTreeWalker(document, NodeFilter.SHOW_COMMENT);
  out.comments = 0;
  while (walker.nextNode()) out.comments++;
  out.errors = window.__errors || null;
  document.body.dataset.test = JSON.stringify(out);
})();
