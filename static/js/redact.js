// "Redact…" in the player (issue 22): text selected in the context panel can be redacted from the
// whole stored session. A small button appears by the selection; pressing it copies the text and
// the event's seq into the Redactions panel's form (#redact-form), opens the panel and focuses
// the label. The form posts itself through htmx, with its CSRF token, like every other form: this
// script sends nothing. Loaded only for maintainers; no inline script, no inline handler.
"use strict";

(function () {
  const MIN_CHARS = 4; // stored_redaction.MIN_TEXT
  let button = null;

  function $(id) { return document.getElementById(id); }

  // The event the context panel shows: the frame's facts (#frame-data, json_script) say it.
  function shownSeq() {
    try { return JSON.parse($("frame-data").textContent).seq; } catch (e) { return undefined; }
  }

  // The selection, when it lies inside the context panel and is long enough to redact.
  function selected() {
    const panel = $("context-panel");
    const selection = window.getSelection();
    if (!panel || !selection || selection.isCollapsed || !selection.rangeCount) return null;
    const range = selection.getRangeAt(0);
    if (!panel.contains(range.commonAncestorContainer)) return null;
    const text = selection.toString().trim();
    return text.length >= MIN_CHARS ? { text: text, range: range, seq: shownSeq() } : null;
  }

  function theButton() {
    if (button) return button;
    button = document.createElement("button");
    button.type = "button";
    button.className = "redact-selection";
    button.textContent = "Redact…";
    button.hidden = true;
    // Pressing it must not clear the selection it acts on.
    button.addEventListener("mousedown", function (event) { event.preventDefault(); });
    button.addEventListener("click", fill);
    document.body.appendChild(button);
    return button;
  }

  function place() {
    const found = selected();
    if (!found || !$("redact-form")) {
      if (button) button.hidden = true;
      return;
    }
    const box = found.range.getBoundingClientRect();
    const b = theButton();
    b.style.top = Math.round(window.scrollY + box.bottom + 6) + "px";
    b.style.left = Math.round(window.scrollX + Math.max(box.left, 8)) + "px";
    b.hidden = false;
  }

  function fill() {
    const found = selected();
    const form = $("redact-form");
    if (!found || !form) return;
    form.elements.text.value = found.text;
    if (found.seq !== undefined && found.seq !== null) form.elements.seq.value = String(found.seq);
    button.hidden = true;
    const details = $("redact-details");
    if (details) details.open = true;
    form.scrollIntoView({ block: "center" });
    form.elements.label.focus();
    form.elements.label.select();
  }

  document.addEventListener("selectionchange", place);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && button && !button.hidden) button.hidden = true;
  });
})();
