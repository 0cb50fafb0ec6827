// The offline player of an evidence bundle (sessions_app/bundles.py inlines this file into the
// bundle's index.html). It runs from disk with no server and makes no request (the page's CSP
// allows none): everything comes from the JSON block #bundle-data.
//
// Everything from the session is inserted as text (textContent), never as HTML: a payload or
// a comment is hostile data. The step list renders only the rows in view (a 100,000-event
// session would otherwise be 100,000 elements), so a step costs the same at any length.
"use strict";

(function () {
  const ROW = 24; // px, the .row height in viewer.css
  const OVERSCAN = 10; // rows rendered above and below the visible ones
  const PAYLOAD_SHOWN = 200000; // characters of a payload shown; the rest is cut (named)

  const data = JSON.parse(document.getElementById("bundle-data").textContent);
  const col = {};
  data.columns.forEach(function (name, i) { col[name] = i; });
  const events = data.events;
  const manifest = data.manifest;
  const session = manifest.session;

  // Comments by the seq their thread is on; the seqs with comments, in order.
  const threadsAt = new Map();
  data.comments.forEach(function (thread) {
    if (!threadsAt.has(thread.seq)) threadsAt.set(thread.seq, []);
    threadsAt.get(thread.seq).push(thread);
  });
  const commentSeqs = Array.from(threadsAt.keys()).sort(function (a, b) { return a - b; });
  // Values removed after the fact (redactions.json), by the seq of their event. A bundle made
  // before the viewer was given them has none to show.
  const redactions = Array.isArray(data.redactions) ? data.redactions : [];
  const removedAt = new Map();
  redactions.forEach(function (removal) {
    if (!removedAt.has(removal.seq)) removedAt.set(removal.seq, []);
    removedAt.get(removal.seq).push(removal);
  });
  // Seqs start at the manifest's first_seq and have no gaps: the index of seq s is s - base.
  const base = events.length ? events[0][col.seq] : 0;

  const $ = function (id) { return document.getElementById(id); };
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  // Pieces of a line, in order: a string is our own text, a node (user text in a <bdi>, a time)
  // goes in as it is. Each user-written piece is isolated: an unclosed right-to-left override in
  // a comment would otherwise reverse the rest of the line.
  function line(node, pieces) {
    pieces.forEach(function (piece) {
      node.append(typeof piece === "string" ? document.createTextNode(piece) : piece);
    });
    return node;
  }
  // A direction control (embedding, override, isolate) written as its code point, "\u202e", as
  // the server's pages show what people wrote: inside its <bdi> it still turned the words after it.
  function written(text) {
    return String(text).replace(/[\u202a-\u202e\u2066-\u2069]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }
  function user(text) { return el("bdi", null, written(text)); }
  // A key's fingerprint in fours, as verify_bundle and the player write it.
  function grouped(fingerprint) { return String(fingerprint).replace(/(.{4})(?=.)/g, "$1 "); }
  // A stored time (ISO 8601, microseconds and offset, as the server writes it) shown to the
  // minute in UTC, "2026-11-27 03:21 UTC", with the full value in datetime and title.
  function when(iso) {
    if (!iso) return document.createTextNode("—");
    const at = Date.parse(String(iso).replace(/(\.\d{3})\d+/, "$1"));
    const node = el("time", null, Number.isNaN(at) ? iso : new Date(at).toISOString().slice(0, 16).replace("T", " ") + " UTC");
    node.dateTime = iso;
    node.title = iso;
    return node;
  }
  function plural(n, one, many) { return count(n) + " " + (n === 1 ? one : many); }
  function money(value) { return "$" + Number(value || 0).toFixed(4); }
  function count(value) { return Number(value || 0).toLocaleString("en-US"); }

  // A cost is "unpriced" when no event of the session had a price: its total of 0 is a sum of
  // nothing, not $0 (bundles made before the server counted priced events say nothing: money).
  const totals = session.totals || {};
  const priced = totals.priced_events === undefined || totals.priced_events > 0;
  function cost(value) { return priced ? money(value) : "unpriced"; }
  function sessionCost() {
    if (!priced) return "unpriced";
    const unpriced = Number(totals.unpriced_events || 0);
    if (!unpriced) return money(totals.cost_usd);
    return money(totals.cost_usd) + " + unpriced (" + count(unpriced) + (unpriced === 1 ? " event" : " events") + " with no known price)";
  }

  // Times as the player shows them: since the session's start, "+1m 23.4s", with the UTC time.
  const startMs = session.started_at ? Date.parse(session.started_at) : NaN;
  function sinceStart(ms) {
    const tenths = Math.round(Math.abs(ms) / 100);
    const seconds = Math.floor(tenths / 10) % 60, tenth = tenths % 10;
    const minutes = Math.floor(tenths / 600) % 60, hours = Math.floor(tenths / 36000);
    const pad = function (n) { return String(n).padStart(2, "0"); };
    if (hours) return hours + "h " + pad(minutes) + "m " + pad(seconds) + "." + tenth + "s";
    if (minutes) return minutes + "m " + pad(seconds) + "." + tenth + "s";
    return seconds + "." + tenth + "s";
  }
  function moment(ts) {
    if (!ts) return "—";
    const at = Date.parse(ts.replace(" ", "T") + "Z"); // the chain's form: naive UTC
    if (Number.isNaN(at)) return ts;
    const iso = new Date(at).toISOString();
    if (Number.isNaN(startMs)) return iso;
    const since = at - startMs;
    return (since < 0 ? "⚠ -" + sinceStart(since) + " before the session's start: timestamps out of order" : "+" + sinceStart(since)) + " · " + iso;
  }

  let current = -1;

  // --- header ------------------------------------------------------------------------------
  function showHeader() {
    // Named as the dashboard names it (its source's id), its task beside: the server's row id
    // means nothing to whoever opens the bundle.
    const title = (session.source_session_id || "session " + session.id).slice(0, 140);
    $("title").textContent = title;
    document.title = title + " · Replay bundle";
    if (session.task) line($("facts"), ["task ", user(session.task.slice(0, 300)), " · "]);
    const c = session.counts || {};
    const t = session.totals || {};
    line($("facts"), [
      "project ", user(session.project), " · " + session.format + " · ",
      session.model ? user(session.model) : "no model named",
      " · " + [
        plural(c.events, "event", "events"),
        plural(c.steps, "step", "steps"),
        sessionCost(),
        plural(t.tokens, "token", "tokens"),
        plural(c.errors, "error", "errors"),
      ].join(" · ") + " · exported ",
      when(manifest.exported_at), " by ", user(manifest.exported_by),
    ]);
    if (redactions.length) {
      // Said before anything else is read: the placeholders are not what the agent recorded.
      const latest = redactions.reduce(function (a, b) { return String(b.at) > String(a.at) ? b : a; });
      const labels = Array.from(new Set(redactions.map(function (r) { return r.label || "manual"; }))).sort();
      line($("redaction-note"), [
        plural(redactions.length, "value was", "values were") + " removed after the fact from " +
          plural(removedAt.size, "event", "events") + " (" + labels.join(", ") + "), the last by ",
        user(latest.by || "?"), " ", when(latest.at),
        ": each reads [REDACTED:label] in its place; the chain still holds, as the value's commitment stays. redactions.json lists them.",
      ]);
      $("redaction-note").hidden = false;
    }
    $("fingerprint").textContent = grouped(data.fingerprint);
    $("head").textContent = manifest.chain.head.slice(0, 16) + "…";
  }

  // --- the step list (virtualised) -----------------------------------------------------------
  const list = $("steps");
  const spacer = $("steps-spacer");
  const rows = new Map(); // index -> element, only those in view

  const spare = []; // rows scrolled out of view, reused rather than made again

  function fillRow(row, i) {
    const e = events[i];
    row.dataset.index = String(i);
    row.style.top = i * ROW + "px";
    row.classList.toggle("error", Boolean(e[col.is_error]));
    row.classList.toggle("current", i === current);
    const parts = row.children;
    parts[0].textContent = "#" + (e[col.seq] + 1); // as people count, as the dashboard does
    parts[1].textContent = e[col.kind];
    parts[2].textContent = e[col.tool] || "";
    const threads = threadsAt.get(e[col.seq]);
    parts[3].textContent = threads ? "● " + threads.length + " comment" + (threads.length > 1 ? "s" : "") : "";
    parts[4].textContent = removedAt.has(e[col.seq]) ? "✂ redacted" : "";
    return row;
  }

  function rowFor(i) {
    let row = spare.pop();
    if (!row) {
      row = el("div", "row");
      row.setAttribute("role", "option");
      row.append(el("span", "seq"), el("span", "kind"), el("span", "tool"), el("span", "has-comment"), el("span", "was-redacted"));
      spacer.appendChild(row);
    }
    row.hidden = false;
    return fillRow(row, i);
  }

  function renderRows() {
    const first = Math.max(0, Math.floor(list.scrollTop / ROW) - OVERSCAN);
    const last = Math.min(events.length - 1, Math.ceil((list.scrollTop + list.clientHeight) / ROW) + OVERSCAN);
    rows.forEach(function (row, i) {
      if (i < first || i > last) { rows.delete(i); row.classList.remove("current"); spare.push(row); }
    });
    for (let i = first; i <= last; i++) {
      if (!rows.has(i)) rows.set(i, rowFor(i));
    }
    spare.forEach(function (row) { row.hidden = true; });
  }

  function scrollIntoView(i) {
    const top = i * ROW;
    if (top < list.scrollTop) list.scrollTop = top;
    else if (top + ROW > list.scrollTop + list.clientHeight) list.scrollTop = top + ROW - list.clientHeight;
  }

  // --- the context panel ---------------------------------------------------------------------
  function pretty(text) {
    if (text === null || text === undefined) return "";
    let shown = text;
    try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (error) { /* shown as stored */ }
    if (shown.length > PAYLOAD_SHOWN) {
      return shown.slice(0, PAYLOAD_SHOWN) + "\n… cut here: " + count(shown.length - PAYLOAD_SHOWN) + " more characters (events.jsonl holds all of it)";
    }
    return shown;
  }

  function fact(dl, name, value) {
    dl.appendChild(el("dt", null, name));
    dl.appendChild(el("dd", null, value));
  }

  function commentNode(comment, reply) {
    const node = el("div", "comment" + (reply ? " reply" : ""));
    node.id = "c-" + comment.id;
    const meta = line(el("div", "meta"), [user(comment.author), " · ", when(comment.created_at)]);
    if (comment.edited_at) line(meta, [" · edited ", when(comment.edited_at), " (" + plural(comment.revisions.length, "earlier version", "earlier versions") + " in comments.json)"]);
    // Restored by the exporting server from another bundle: author and time are that bundle's word.
    if (comment.restored_from) line(meta, [" · ", el("span", "restored", "restored from a bundle signed by " + grouped(comment.restored_from))]);
    // Its author did not write the [REDACTED:…] placeholders: said, with who put them there.
    if (comment.redacted_at) line(meta, [" · ", el("span", "redacted", "changed by a redaction by "), user(comment.redacted_by), " ", when(comment.redacted_at)]);
    node.appendChild(meta);
    // A block of its own, so its text is isolated from the lines around it.
    node.appendChild(comment.deleted_at ? line(el("div", "body"), ["(deleted ", when(comment.deleted_at), ")"]) : el("div", "body", written(comment.body)));
    return node;
  }

  function threadNode(thread) {
    const node = el("div", "thread" + (thread.resolved_at ? " resolved" : ""));
    node.appendChild(commentNode(thread, false));
    thread.replies.forEach(function (reply) { node.appendChild(commentNode(reply, true)); });
    if (thread.resolved_at) node.appendChild(line(el("div", "meta"), ["resolved by ", user(thread.resolved_by), " · ", when(thread.resolved_at)]));
    return node;
  }

  function showContext(i) {
    const e = events[i];
    const seq = e[col.seq];
    $("event-title").textContent = "Event #" + (seq + 1) + " · " + e[col.kind];
    const dl = $("context");
    dl.replaceChildren();
    fact(dl, "seq", seq);
    fact(dl, "kind", e[col.kind]);
    fact(dl, "time", moment(e[col.ts]));
    // The step number the agent recorded (the player's "recorded step"), not a count of steps.
    fact(dl, "recorded step", e[col.step] === null ? "—" : e[col.step]);
    if (e[col.tool]) fact(dl, "tool / model", e[col.tool]);
    fact(dl, "error", e[col.is_error] ? "yes" : "no");
    fact(dl, "cost so far", cost(e[col.cost_total]));
    fact(dl, "tokens so far", count(e[col.tokens_total]));
    fact(dl, "errors so far", count(e[col.errors_total]));
    fact(dl, "steps so far", count(e[col.steps_total]));
    fact(dl, "elapsed", (Number(e[col.elapsed_ms] || 0) / 1000).toFixed(1) + " s");
    (removedAt.get(seq) || []).forEach(function (removal) {
      dl.appendChild(el("dt", "redacted", "removed after the fact"));
      dl.appendChild(line(el("dd", "redacted"), [
        removal.field + " [" + (removal.label || "manual") + "] by ", user(removal.by || "?"), " ", when(removal.at),
      ]));
    });

    const box = $("step-comments");
    box.replaceChildren();
    $("comments-title").textContent = "Comments at #" + (seq + 1); // as the player says it
    const threads = threadsAt.get(seq) || [];
    if (!threads.length) box.appendChild(el("p", "empty", "No comments on this event."));
    threads.forEach(function (thread) { box.appendChild(threadNode(thread)); });

    $("payload").textContent = pretty(e[col.payload]);
    const state = e[col.step_state];
    $("step-state-box").hidden = state === null || state === undefined;
    $("step-state").textContent = state ? pretty(state) : "";
  }

  // --- moving --------------------------------------------------------------------------------
  function show(i) {
    if (!events.length) return;
    i = Math.max(0, Math.min(events.length - 1, i));
    const before = rows.get(current);
    if (before) before.classList.remove("current");
    current = i;
    $("scrubber").value = String(i);
    $("position").textContent = "event " + (i + 1).toLocaleString("en-US") + " of " + events.length.toLocaleString("en-US");
    scrollIntoView(i);
    renderRows();
    const row = rows.get(i);
    if (row) row.classList.add("current");
    showContext(i);
    rememberSeq(events[i][col.seq]);
  }

  // The address keeps the shown event (#seq=N), written once stepping pauses: browsers refuse
  // (and warn about) more than a few hundred history updates in a few seconds.
  let remember = null;
  function rememberSeq(seq) {
    clearTimeout(remember);
    remember = setTimeout(function () {
      try { history.replaceState(null, "", "#seq=" + seq); } catch (error) { /* file:// may refuse */ }
    }, 300);
  }

  function indexOfSeq(seq) { return seq - base; }

  function nextCommentFrom(i, step) {
    const seq = events[i][col.seq];
    if (step > 0) {
      for (const s of commentSeqs) if (s > seq) return indexOfSeq(s);
    } else {
      for (let k = commentSeqs.length - 1; k >= 0; k--) if (commentSeqs[k] < seq) return indexOfSeq(commentSeqs[k]);
    }
    return i;
  }

  function nextErrorFrom(i) {
    for (let k = i + 1; k < events.length; k++) if (events[k][col.is_error]) return k;
    return i;
  }

  // --- lists of comments and sign-offs, scrubber marks -----------------------------------------
  function jumpLink(text, seq) {
    const link = el("a", null, text);
    link.href = "#seq=" + seq;
    link.addEventListener("click", function (event) { event.preventDefault(); show(indexOfSeq(seq)); });
    return link;
  }

  function showLists() {
    const all = $("all-comments");
    if (!data.comments.length) all.appendChild(el("li", null, "No comments."));
    data.comments.forEach(function (thread) {
      const item = el("li");
      item.appendChild(jumpLink("event #" + (thread.seq + 1), thread.seq));
      line(item, [
        " · ", user(thread.author), ": ", thread.deleted_at ? "(deleted)" : user(thread.body.slice(0, 120)),
        (thread.replies.length ? " (+" + plural(thread.replies.length, "reply", "replies") + ")" : "") + (thread.resolved_at ? " · resolved" : ""),
      ]);
      all.appendChild(item);
    });
    const reviews = $("reviews");
    if (!data.reviews.length) reviews.appendChild(el("li", null, "No sign-off."));
    data.reviews.forEach(function (review) {
      const item = el("li");
      item.appendChild(el("span", "verdict-" + review.verdict, review.verdict.replace("_", " ")));
      line(item, [
        " by ", user(review.reviewer), " · ", when(review.created_at),
        " · covers events #" + (review.first_seq + 1) + "–#" + (review.last_seq + 1) + " · head " + review.chain_head.slice(0, 16) + "…" + (review.chain_valid ? "" : " · chain was broken"),
      ]);
      if (review.note) line(item, [" · ", user(review.note)]);
      // A sign-off this bundle's server restored from another bundle: its reviewer and time are
      // what that bundle said, as the player marks it.
      if (review.restored_from) line(item, [" · ", el("span", "restored", "restored from a bundle signed by " + grouped(review.restored_from))]);
      if (review.redacted_at) line(item, [" · ", el("span", "redacted", "note changed by a redaction by "), user(review.redacted_by), " ", when(review.redacted_at)]);
      reviews.appendChild(item);
    });
    const marks = $("marks");
    const span = Math.max(1, events.length - 1);
    commentSeqs.forEach(function (seq) {
      const mark = el("div", "mark");
      mark.style.left = (indexOfSeq(seq) / span) * 100 + "%";
      mark.title = "comment at event #" + (seq + 1);
      mark.addEventListener("click", function () { show(indexOfSeq(seq)); });
      marks.appendChild(mark);
    });
  }

  // --- wiring ----------------------------------------------------------------------------------
  function start() {
    showHeader();
    $("loading").hidden = true;
    $("viewer").hidden = false;
    spacer.style.height = events.length * ROW + "px";
    const scrubber = $("scrubber");
    scrubber.max = String(Math.max(0, events.length - 1));
    scrubber.addEventListener("input", function () { show(Number(scrubber.value)); });
    list.addEventListener("scroll", renderRows, { passive: true });
    list.addEventListener("click", function (event) {
      const row = event.target.closest(".row");
      if (row) show(Number(row.dataset.index));
    });
    $("first").addEventListener("click", function () { show(0); });
    $("prev").addEventListener("click", function () { show(current - 1); });
    $("next").addEventListener("click", function () { show(current + 1); });
    $("last").addEventListener("click", function () { show(events.length - 1); });
    $("prev-comment").addEventListener("click", function () { show(nextCommentFrom(current, -1)); });
    $("next-comment").addEventListener("click", function () { show(nextCommentFrom(current, 1)); });
    $("next-error").addEventListener("click", function () { show(nextErrorFrom(current)); });
    document.addEventListener("keydown", function (event) {
      if (event.target === scrubber || event.altKey || event.ctrlKey || event.metaKey) return;
      const moves = {
        ArrowRight: 1, ArrowDown: 1, j: 1, ArrowLeft: -1, ArrowUp: -1, k: -1,
        PageDown: 20, PageUp: -20,
      };
      if (event.key in moves) show(current + moves[event.key]);
      else if (event.key === "Home") show(0);
      else if (event.key === "End") show(events.length - 1);
      else if (event.key === "n") show(nextCommentFrom(current, 1));
      else if (event.key === "p") show(nextCommentFrom(current, -1));
      else if (event.key === "e") show(nextErrorFrom(current));
      else return;
      event.preventDefault();
    });
    showLists();
    const wantedSeq = function () {
      const wanted = /^#seq=(\d+)$/.exec(location.hash);
      return wanted ? Number(wanted[1]) : null;
    };
    renderRows();
    const first = wantedSeq();
    show(first === null ? 0 : indexOfSeq(first));
    // A #seq=N typed in the address bar or followed from a link later moves the viewer too (our
    // own replaceState fires no hashchange).
    window.addEventListener("hashchange", function () {
      const seq = wantedSeq();
      if (seq !== null && events.length && seq !== events[current][col.seq]) show(indexOfSeq(seq));
    });
    if (!events.length) $("event-title").textContent = "This session has no events.";
  }

  start();
})();
