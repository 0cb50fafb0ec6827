// Site-wide behaviour: the CSRF token on htmx requests, and the upload drop zone.
// No inline scripts anywhere (CSP): pages pass data through json_script elements.
"use strict";

(function () {
  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb !== "get") {
      event.detail.headers["X-CSRFToken"] = csrfToken();
    }
  });

  // Drag and drop onto the upload form: the dropped files become the file input's selection
  // and the form is submitted, exactly as if they had been picked.
  document.addEventListener("dragover", function (event) {
    const zone = event.target.closest && event.target.closest("#dropzone");
    if (zone) {
      event.preventDefault();
      zone.classList.add("dragging");
    }
  });
  document.addEventListener("dragleave", function (event) {
    const zone = event.target.closest && event.target.closest("#dropzone");
    if (zone) zone.classList.remove("dragging");
  });
  document.addEventListener("drop", function (event) {
    const zone = event.target.closest && event.target.closest("#dropzone");
    if (!zone) return;
    event.preventDefault();
    zone.classList.remove("dragging");
    const input = zone.querySelector('input[type="file"]');
    if (!input || !event.dataTransfer || !event.dataTransfer.files.length) return;
    input.files = event.dataTransfer.files;
    input.form.requestSubmit();
  });

  // Picking files uploads them at once; after an upload the picker is cleared.
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches('#upload-form input[type="file"]') && event.target.files.length) {
      event.target.form.requestSubmit();
    }
  });
  // After a successful upload or checkpoint, the form is ready for the next one.
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (form && (form.id === "upload-form" || form.id === "checkpoint-form") && event.detail.successful) {
      form.reset();
    }
  });
})();
