// New run: the line where the spec stopped reading as YAML (the textarea's data-error-line,
// from 1) is selected in the editor and scrolled into view, so the caret of the error under
// the form points at something the user sees.
(function () {
  "use strict";

  function lineBounds(text, line) {
    var start = 0;
    for (var i = 1; i < line; i++) {
      var next = text.indexOf("\n", start);
      if (next < 0) return null;
      start = next + 1;
    }
    var end = text.indexOf("\n", start);
    return [start, end < 0 ? text.length : end];
  }

  function markErrorLine(editor) {
    var line = parseInt(editor.dataset.errorLine, 10);
    var bounds = line > 0 ? lineBounds(editor.value, line) : null;
    if (!bounds) return;
    editor.focus({ preventScroll: true });
    editor.setSelectionRange(bounds[0], bounds[1]);
    var height = parseFloat(getComputedStyle(editor).lineHeight) || 18;
    editor.scrollTop = Math.max(0, (line - 3) * height);
    editor.classList.add("has-error-line");
    editor.addEventListener(
      "input",
      function () {
        editor.classList.remove("has-error-line");
        delete editor.dataset.errorLine;
      },
      { once: true }
    );
  }

  function init() {
    var editor = document.querySelector("textarea[data-error-line]");
    if (editor) markErrorLine(editor);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
