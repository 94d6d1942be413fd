// Parts of a page that refresh themselves (htmx polling) keep what the reader was doing: the control that
// had the keyboard focus gets it back, and a log keeps its scroll position (following new output while it
// is scrolled to the end). Without this, focus fell to the page every refresh: a keyboard user could not
// reach Cancel on a running job, and a long log jumped back to its first line.
(function () {
  "use strict";
  var saved = null;

  function atEnd(log) { return log.scrollTop + log.clientHeight >= log.scrollHeight - 4; }

  function pathFrom(root, el) {
    var path = [];
    for (var node = el; node && node !== root; node = node.parentElement) {
      path.unshift(Array.prototype.indexOf.call(node.parentElement.children, node));
    }
    return path;
  }

  function find(root, focus) {
    if (focus.id) return document.getElementById(focus.id);
    if (focus.href) {
      var links = root.querySelectorAll("a[href]");
      for (var i = 0; i < links.length; i++) if (links[i].getAttribute("href") === focus.href) return links[i];
    }
    if (focus.action) {
      var forms = root.querySelectorAll("form[action]");
      for (var j = 0; j < forms.length; j++) {
        if (forms[j].getAttribute("action") === focus.action) return forms[j].querySelector(focus.tag);
      }
    }
    var node = root;
    for (var k = 0; node && k < focus.path.length; k++) node = node.children[focus.path[k]];
    return node && node.tagName === focus.tag.toUpperCase() ? node : null;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target, el = document.activeElement, log = document.getElementById("log");
    saved = {rootId: target.id, focus: null, log: null};
    if (el && el !== document.body && target.contains(el)) {
      var form = el.form || null;
      saved.focus = {id: el.id, tag: el.tagName.toLowerCase(), href: el.getAttribute("href"),
                     action: form && form.getAttribute("action"), path: pathFrom(target, el)};
    }
    if (log && target.contains(log)) saved.log = {top: log.scrollTop, end: atEnd(log)};
  });

  document.addEventListener("htmx:afterSettle", function () {
    if (!saved) return;
    var root = document.getElementById(saved.rootId), log = document.getElementById("log");
    if (root && saved.focus) {
      var el = find(root, saved.focus);
      if (el && typeof el.focus === "function") el.focus({preventScroll: true});
    }
    if (log && saved.log) log.scrollTop = saved.log.end ? log.scrollHeight : saved.log.top;
    saved = null;
  });

  document.addEventListener("DOMContentLoaded", function () {
    var log = document.getElementById("log");
    if (log) log.scrollTop = log.scrollHeight;  // a log opens at its latest output
  });
})();
