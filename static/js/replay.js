// Site-wide behaviour: the CSRF token on htmx requests, the upload drop zone, and the alert
// that says when an htmx request failed.
// No inline scripts anywhere (CSP): pages pass data through json_script elements.
"use strict";

(function () {
  function csrfToken() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }

  // Pushing the address already shown adds a history entry Back stays on: a search box that
  // answers a pause in typing, then Enter's change and submit, asked up to three times.
  document.addEventListener("htmx:beforeHistoryUpdate", function (event) {
    const update = event.detail.history;
    if (update && update.type === "push" && new URL(update.path, location.href).href === location.href) {
      update.type = "replace";
    }
  });

  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb !== "get") {
      event.detail.headers["X-CSRFToken"] = csrfToken();
    }
  });

  // Drag and drop onto the upload form: the dropped files become the file input's selection,
  // exactly as if they had been picked. Nothing is sent until Upload is pressed, so the project
  // and format chosen after the files are the ones the upload uses.
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
  });

  // A destructive form sent without htmx (a page load, so hx-confirm does not apply) asks first,
  // with its data-confirm text: the htmx ones ask through hx-confirm. CSP allows no onsubmit.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    const question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (!question) return;
    if (!window.confirm(question)) {
      event.preventDefault();
      return;
    }
    // Asked here: the server's own question (for a browser without script, views/pages.py
    // asked_first) is not asked again. Its <noscript> field is an element only where a panel
    // was swapped in by htmx, which parses <noscript> as markup.
    form.querySelectorAll('input[name="ask_first"]').forEach(function (input) { input.remove(); });
  });

  // A file past the upload limit is refused here, with its name, before its bytes are sent: the
  // server would refuse it (413) without reading it, which a browser may report as a broken
  // connection rather than as the answer.
  document.addEventListener("htmx:confirm", function (event) {
    const form = event.detail.elt;
    if (!form || form.id !== "upload-form" || !form.dataset.maxBytes) return;
    const limit = Number(form.dataset.maxBytes);
    const input = form.querySelector('input[type="file"]');
    const tooLarge = Array.from((input && input.files) || []).filter((file) => file.size > limit);
    if (!tooLarge.length) return;
    event.preventDefault();
    const box = document.getElementById("upload-errors");
    if (!box) return;
    const megabytes = (bytes) => (bytes / 1024 / 1024).toFixed(1);
    const lines = tooLarge.map(function (file) {
      const line = document.createElement("p");
      line.className = "error upload-error";
      line.dir = "auto";
      line.textContent = `${file.name}: the upload (${megabytes(file.size)} MB) exceeds the limit of ${megabytes(limit)} MB (REPLAY_MAX_UPLOAD_MB).`;
      return line;
    });
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "link-button";
    dismiss.dataset.dismiss = "upload-errors";
    dismiss.textContent = "dismiss";
    box.replaceChildren(...lines, dismiss);
    box.hidden = false;
    input.value = "";  // the files only: the chosen project and format stay for the next pick
  });
  // After a successful upload or checkpoint, the form is ready for the next one. A refusal
  // (4xx, swapped in with its reason: base.html's responseHandling) counts as "successful" to
  // htmx, so the status decides: what was typed stays for the next try.
  function succeeded(detail) {
    return detail.successful && detail.xhr && detail.xhr.status < 300;
  }
  document.addEventListener("htmx:afterRequest", function (event) {
    const form = event.detail.elt;
    if (!form || !succeeded(event.detail)) return;
    if (form.id === "upload-form") {
      // The files are cleared; the project and format chosen stay for the next upload.
      const input = form.querySelector('input[type="file"]');
      if (input) input.value = "";
    } else if (form.id === "checkpoint-form") {
      form.reset();
    }
  });

  // A request that failed (5xx, a 4xx that has no partial, no connection) is not swapped over the
  // page; the #request-error alert (base.html) says what happened until it is dismissed or a
  // request to the same URL succeeds (the retry; a poll elsewhere succeeding must not hide it
  // unread). By URL, not element: a success may swap the element that failed away.
  let failedPath = null;
  function pathOf(detail) {
    return detail.pathInfo ? detail.pathInfo.requestPath : null;
  }
  function requestError(detail, text) {
    const box = document.getElementById("request-error");
    if (!box) return;
    failedPath = pathOf(detail);
    box.hidden = false; // shown first, so the text arrives inside a rendered alert region
    box.querySelector(".request-error-text").textContent = text;
  }
  function clearRequestError() {
    const box = document.getElementById("request-error");
    failedPath = null;
    if (box && !box.hidden) {
      box.hidden = true;
      box.querySelector(".request-error-text").textContent = "";
    }
  }
  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    const status = xhr ? `${xhr.status}${xhr.statusText ? " " + xhr.statusText : ""}` : "error";
    requestError(event.detail, `The server could not do that (HTTP ${status}). Nothing on this page changed; try again, or reload the page.`);
  });
  document.addEventListener("htmx:sendError", function (event) {
    requestError(event.detail, "The request did not reach the server (no connection?). Nothing on this page changed; try again.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (failedPath && pathOf(event.detail) === failedPath && succeeded(event.detail)) clearRequestError();
  });
  // A change refused outright (403: the role was lowered meanwhile; 404: the session was deleted)
  // answers with the site's refusal (replay_site/errors.py), not with the panel: swapped over the
  // panel, it took the panel's id, what was typed and the form with it, and every later press
  // of the form had nowhere to go. The reason goes to the page alert; the panel stays as it was.
  // A refused read (a step, a pager) still shows its reason where the content would have been.
  document.addEventListener("htmx:beforeSwap", function (event) {
    const detail = event.detail;
    const status = detail.xhr ? detail.xhr.status : 0;
    if ((status !== 403 && status !== 404) || !detail.requestConfig || detail.requestConfig.verb === "get") return;
    const answer = new DOMParser().parseFromString(detail.xhr.responseText, "text/html");
    const reason = answer.getElementById("refusal");
    if (!reason) return; // a panel's own answer (its form with the error beside the field)
    detail.shouldSwap = false;
    const said = reason.textContent.trim();
    requestError(detail, said + (/[.!?]$/.test(said) ? " " : ". ") + "Nothing on this page changed; what you typed is kept.");
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("[data-dismiss-error]")) clearRequestError();
  });
  // A compare pick (A or B on the sessions list) goes into the address as it is made, as a
  // filter does: a reload or a copied link keeps it (it had waited for the next filter or page).
  document.addEventListener("change", function (event) {
    const input = event.target;
    if (!input.matches || !input.matches('input[type="radio"][form="compare-form"]')) return;
    const url = new URL(window.location.href);
    url.searchParams.set(input.name, input.value);
    history.replaceState(history.state, "", url);
  });
  // A tour's stops are replaced whole by a move, an edit or a delete: htmx keeps the focus on a
  // control of the same id (each stop's buttons have their own), and where that control is gone
  // (a stop moved to the top has no "Up") the moved stop itself takes it, not the page.
  document.addEventListener("htmx:afterSettle", function (event) {
    const section = event.detail.elt;
    if (!section || section.id !== "tour-stops") return;
    const stop = section.getAttribute("data-focus-stop");
    if (!stop || (document.activeElement && document.activeElement !== document.body)) return;
    const item = section.querySelector('[data-stop="' + stop + '"]');
    if (item) item.focus();
  });
  // Every other swap that replaces the focused control (a verify, a sign-off, a comment's
  // resolve, the audit log's pager: each answers with its panel whole) left the focus on the
  // page itself, and a keyboard user at its top. htmx keeps the focus only on a control of the
  // same id; failing that, it goes to the control of the same kind and words in the new panel
  // (the form's action or the link's address too, when one matches), else to the panel.
  // One record a swapped panel, by its id: a swap elsewhere between a swap and its settle (the
  // chain badge asking again, a panel loading itself) used to clear the one record there was.
  const focusBeforeSwap = new Map();
  // Where the focus was when the request left: a control disabled while it runs
  // (hx-disabled-elt, a verification's seconds) has dropped it to the page by the swap.
  // Kept by the element that made the request (a poll elsewhere must not overwrite it).
  const focusAtRequest = new WeakMap();
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (document.activeElement && document.activeElement !== document.body) {
      focusAtRequest.set(event.detail.elt, document.activeElement);
    }
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    const active = document.activeElement;
    const asker = event.detail.requestConfig ? event.detail.requestConfig.elt : event.detail.elt;  // the form, not the target
    const focused = active && active !== document.body ? active : focusAtRequest.get(asker);
    const target = event.detail.target;
    if (!target || !target.id) return;
    focusBeforeSwap.delete(target.id);
    if (!focused || focused === document.body || !target.contains(focused)) return;
    focusBeforeSwap.set(target.id, {
      area: target.id, tag: focused.tagName, words: focused.textContent.trim(),
      where: focused.form ? focused.form.getAttribute("action") : focused.getAttribute("href"),
    });
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    const settled = event.detail.target || event.detail.elt;
    const id = settled && settled.id;
    const was = id ? focusBeforeSwap.get(id) : null;
    if (id) focusBeforeSwap.delete(id);
    if (!was || (document.activeElement && document.activeElement !== document.body)) return;
    const area = document.getElementById(was.area);
    if (!area) return;
    const where = function (node) { return node.form ? node.form.getAttribute("action") : node.getAttribute("href"); };
    const usable = Array.from(area.querySelectorAll(was.tag)).filter(function (node) { return !node.disabled; });
    const alike = usable.filter(function (node) { return node.textContent.trim() === was.words; });
    // The same form (its action) or link, in the same words; else the one control of that form
    // whose words changed (a thread's resolve, now its reopen); a link of the same words only
    // where its address is what changed (a pager's Older), never another object's button
    // (another thread's resolve).
    const sameForm = was.where ? usable.filter(function (node) { return where(node) === was.where; }) : [];
    const same = alike.find(function (node) { return where(node) === was.where; })
      || (sameForm.length === 1 ? sameForm[0] : null) || (was.tag === "A" ? alike[0] : null);
    if (same) same.focus({ preventScroll: true });
    if (document.activeElement === same && same) return;
    // Nothing like it, or it cannot take the focus (inside a closed <details>): the panel does.
    if (!area.hasAttribute("tabindex")) area.setAttribute("tabindex", "-1");
    area.focus({ preventScroll: true });
  });
  // The audit log's verification, answered alone (htmx): the row of the entry it found broken,
  // when the page lists it, is marked as the full page marks it (audit.html's broken-entry).
  document.addEventListener("htmx:afterSettle", function (event) {
    const answer = event.detail.elt;
    if (!answer || answer.id !== "log-verification") return;
    document.querySelectorAll("tr.broken-entry").forEach(function (row) { row.classList.remove("broken-entry"); });
    const link = answer.querySelector('a[href^="#entry-"]');
    const row = link && document.getElementById(link.getAttribute("href").slice(1));
    if (row) row.classList.add("broken-entry");
  });
  // A message kept until read (the upload panel's errors): its dismiss button hides it (the
  // page's own is a link to the list, for a browser without JavaScript: not followed here).
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("[data-dismiss]");
    const box = button && document.getElementById(button.getAttribute("data-dismiss"));
    if (box) {
      event.preventDefault();
      box.hidden = true;
      box.replaceChildren();
    }
  });
})();
