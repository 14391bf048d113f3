// Injected in a <script> right after <head>: records every error and console warning/error
// into window.__errors, and marks its own script element so drive.js can tell it apart.
(function () {
  var me = document.currentScript;
  if (me) me.setAttribute('data-test', 'guard');
  var errors = window.__errors = [];
  window.onerror = function (msg, src, line, col) {
    errors.push('error: ' + String(msg) + ' @' + line + ':' + col);
  };
  window.addEventListener('unhandledrejection', function (e) {
    errors.push('unhandled rejection: ' + String(e.reason));
  });
  // Every text drawn on a canvas since its last full clear, as a box in canvas pixels (rotated
  // text left out): window.__clippedTexts() lists those cut at the canvas's edge or drawn
  // over another.
  var boxes = new Map();
  var C = CanvasRenderingContext2D.prototype, fill = C.fillText, clear = C.clearRect;
  C.clearRect = function (x, y, w, h) {
    var m = this.getTransform();
    if (x <= 0 && y <= 0 && m.a * w >= this.canvas.width && m.d * h >= this.canvas.height) boxes.set(this.canvas, []);
    return clear.apply(this, arguments);
  };
  C.fillText = function (text, x, y) {
    var m = this.getTransform(), t = this.measureText(text);
    if (m.b === 0 && m.c === 0 && String(text).length) {
      var align = this.textAlign, w = t.width;
      var left = align === 'right' || align === 'end' ? x - w : align === 'center' ? x - w / 2 : x;
      var box = { text: String(text), l: m.a * left + m.e, r: m.a * (left + w) + m.e,
        t: m.d * (y - t.actualBoundingBoxAscent) + m.f, b: m.d * (y + t.actualBoundingBoxDescent) + m.f };
      if (!boxes.has(this.canvas)) boxes.set(this.canvas, []);
      boxes.get(this.canvas).push(box);
    }
    return fill.apply(this, arguments);
  };
  window.__clippedTexts = function () {
    var bad = [];
    boxes.forEach(function (list, cv) {
      if (cv.hidden || !cv.offsetParent) return;
      var r = window.devicePixelRatio || 1, slack = 1.5 * r;
      list.forEach(function (a, i) {
        if (a.l < -slack || a.r > cv.width + slack || a.t < -slack || a.b > cv.height + slack) {
          bad.push((cv.id || 'canvas') + ': "' + a.text + '" past the edge');
        }
        list.slice(i + 1).forEach(function (b) {
          var x = Math.min(a.r, b.r) - Math.max(a.l, b.l), y = Math.min(a.b, b.b) - Math.max(a.t, b.t);
          if (x > slack && y > slack) bad.push((cv.id || 'canvas') + ': "' + a.text + '" over "' + b.text + '"');
        });
      });
    });
    return bad;
  };
  ['error', 'warn'].forEach(function (kind) {
    var orig = console[kind];
    console[kind] = function () {
      errors.push(kind + ': ' + Array.prototype.map.call(arguments, String).join(' '));
      return orig.apply(console, arguments);
    };
  });
})();
