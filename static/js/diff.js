// The diff view's scrubber: draws how long each session is and where they first diverge under
// the range input (htmx does the rest: moving it fetches the aligned rows at that step).
"use strict";

(function () {
  function share(el, attr) {
    const total = parseFloat(el.getAttribute("data-total")) || 1;
    return Math.max(0, Math.min(1, (parseFloat(el.getAttribute(attr)) || 0) / total));
  }
  function draw() {
    document.querySelectorAll(".diff-lengths [data-steps]").forEach(function (el) {
      el.style.width = (share(el, "data-steps") * 100).toFixed(2) + "%";
    });
    document.querySelectorAll(".diff-lengths .div-mark").forEach(function (el) {
      el.style.left = (share(el, "data-step") * 100).toFixed(2) + "%";
    });
  }
  // A screen reader hears the step counted from 1, as the page counts it, not the 0-based value.
  document.addEventListener("input", function (event) {
    const range = event.target;
    if (range.id !== "diff-offset") return;
    range.setAttribute("aria-valuetext", "step " + (Number(range.value) + 1) + " of " + (Number(range.max) + 1));
  });
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:historyRestore", draw);
})();
