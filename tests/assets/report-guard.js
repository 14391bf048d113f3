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
  ['error', 'warn'].forEach(function (kind) {
    var orig = console[kind];
    console[kind] = function () {
      errors.push(kind + ': ' + Array.prototype.map.call(arguments, String).join(' '));
      return orig.apply(console, arguments);
    };
  });
})();
