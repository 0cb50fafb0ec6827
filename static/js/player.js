// The player: controls, keyboard, scrubber, playback pace and the live tail.
//
// The server renders everything; this script only decides *when* to ask for which step. A step
// is fetched by submitting the #controls form (htmx: GET, swap #step-list, replace the URL);
// the response carries the frame's facts (#frame-data: previous/next visible event, next turn
// boundary, errors, timestamps) and the side panels out of band.
"use strict";

(function () {
  const IDLE_MAX_MS = 1500; // a recorded gap longer than this (after speed) is compressed
  const LATE_MS = 60; // a frame that came this much later than its recorded gap: playback is behind
  const DRAG_EVERY_MS = 120; // while scrubbing, at most one step request per this interval
  const FOLLOW_EVERY_MS = 300; // a live session's player jumps to new events at most this often
  const player = { playing: false, timer: null, stopAt: null, dragging: false, dragTimer: null,
                   pendingSeq: null, source: null, liveLast: -1, followTimer: null, frameAskedAt: 0, frameLoadMs: 0,
                   awaiting: false, pendingSteps: 0 };
  const STEP_WAIT_MAX_MS = 5000; // a step asked for longer ago than this no longer holds the presses back
  // Tour mode: the stop ({number, seq}) that "play to next stop" pauses at, while it plays.
  let tourStop = null;
  // Set when "Play to next stop" leaves a stop: that frame's URL is pushed, not replaced (below).
  let pushNextFrame = false;

  function $(id) { return document.getElementById(id); }
  function readJson(id) {
    const el = $(id);
    if (!el) return null;
    try { return JSON.parse(el.textContent); } catch (e) { return null; }
  }
  function frame() { return readJson("frame-data"); }
  function onPlayer() { return !!$("controls") && !!$("step-list"); }

  // ---- navigation -------------------------------------------------------------------------
  function go(seq, keepPending) {
    const form = $("controls");
    if (!form || seq === null || seq === undefined) return;
    if (!keepPending) player.pendingSteps = 0;
    player.awaiting = true;
    const f = frame();
    if (f) seq = Math.max(0, Math.min(seq, Math.max(f.last_event, player.liveLast)));
    form.elements.step.value = String(seq);
    player.frameAskedAt = performance.now();
    form.requestSubmit();
  }

  function status(text) {
    const el = $("play-status");
    if (el) el.textContent = text;
  }

  // ---- playback -----------------------------------------------------------------------------
  function speed() {
    const el = $("speed");
    const value = el ? parseFloat(el.value) : 1;
    return value > 0 ? value : 1;
  }
  function recordedPace() {
    const el = $("pace");
    return !!el && el.value === "recorded";
  }

  function setPlaying(on, reason) {
    const was = player.playing;
    player.playing = on;
    if (!on) {
      tourStop = null;
      pushNextFrame = false; // a stop left by playing that never got its first frame: no push later
    }
    if (on) {
      player.frameAskedAt = performance.now();
      player.frameLoadMs = 0;
    }
    // While playing, a tour's "Back to the stop" would be about a stop being left behind on
    // purpose (playing to the next one, or on from this one): the page hides it meanwhile.
    document.body.classList.toggle("playing", on);
    clearTimeout(player.timer);
    player.timer = null;
    const button = $("play");
    if (button) {
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.textContent = on ? "❚❚ Pause" : "▶ Play";
    }
    showTourPlaying();
    // Off, the status says why it stopped, or "Paused" when the user paused; "Playing at …"
    // never outlives playback.
    if (!on) status(reason || (was ? "Paused." : ""));
    if (on) scheduleNext();
  }

  function scheduleNext() {
    if (!player.playing) return;
    const f = frame();
    if (!f) return setPlaying(false);
    if (f.next === null) return setPlaying(false, "Stopped at the end.");
    let target = f.next;
    let targetTs = f.next_ts;
    let boundary = false;
    if (f.turn !== null && f.turn <= target && !tourStop) {
      target = f.turn;
      targetTs = f.turn_ts;
      boundary = true;
    }
    let delay = 1000 / speed();
    let note = "Playing at " + speed() + "×";
    if (recordedPace()) {
      const gap = f.ts !== null && targetTs !== null ? Math.max(0, targetTs - f.ts) : 0;
      delay = gap / speed();
      note = "Playing in recorded time at " + speed() + "×";
      if (delay > IDLE_MAX_MS) {
        note = "Idle " + humanMs(gap) + " compressed to " + (IDLE_MAX_MS / 1000) + " s";
        delay = IDLE_MAX_MS;
      }
    }
    // Each event is one request: where the recorded gaps are shorter than a request takes, the
    // player falls behind the recording, and says so rather than claim the recorded time. The
    // frame's own load time tells (a speed picked within a gap, long after the frame came, is
    // no sign of it).
    if (recordedPace() && player.frameLoadMs > delay + LATE_MS) {
      note += " (behind: each event takes longer to load than its recorded gap)";
    }
    // Playing to a tour's stop: stop there even when a filter hides its event.
    const arriving = tourStop && target >= tourStop.seq ? tourStop.number : null;
    if (arriving !== null) target = tourStop.seq;
    status(note + (tourStop ? " to stop " + tourStop.number : ""));
    player.stopAt = boundary ? target : null;
    // The pace counts from when this frame was asked for, so the server's answer time is part
    // of the gap rather than added to it.
    const wait = Math.max(0, delay - (performance.now() - player.frameAskedAt));
    // One pending frame at most, and none once paused: a second schedule (two settles of one
    // frame) would otherwise leave a timer that pause cannot clear, moving a paused player.
    clearTimeout(player.timer);
    player.timer = setTimeout(function () {
      player.timer = null;
      if (!player.playing) return;
      if (arriving !== null) markStop(arriving); // the frame of the stop brings its narration
      go(target);
    }, wait);
  }

  // A step is one visible event from the shown one, and only the answer knows the next: quick
  // presses made while a step is on its way are counted and taken one by one as the frames
  // arrive (asking at once would ask for the same step each time and lose the presses).
  function stepBy(direction) {
    const f = frame();
    if (player.awaiting && performance.now() - player.frameAskedAt < STEP_WAIT_MAX_MS) {
      player.pendingSteps += direction;
      return;
    }
    if (f) go(direction > 0 ? f.next : f.prev);
  }

  function takePendingStep(f) {
    if (!player.pendingSteps) return false;
    const direction = player.pendingSteps > 0 ? 1 : -1;
    const target = direction > 0 ? f.next : f.prev;
    if (target === null || target === undefined) {
      player.pendingSteps = 0;
      return false;
    }
    player.pendingSteps -= direction;
    go(target, true);
    return true;
  }

  function afterFrame() {
    const f = frame();
    if (player.awaiting) player.frameLoadMs = performance.now() - player.frameAskedAt;
    player.awaiting = false;
    showTourPlaying(); // the narration panel comes again with every frame
    if (!f) return;
    updateControls(f);
    if (!player.dragging) placeCursor(f.seq);
    scrollCurrentIntoView();
    if (takePendingStep(f)) return;
    if (!player.playing) return;
    if (tourStop && f.seq >= tourStop.seq) {
      const reached = tourStop.number;
      setPlaying(false, "Paused at stop " + reached + ".");
      return;
    }
    if (player.stopAt !== null && f.seq >= player.stopAt) {
      player.stopAt = null;
      setPlaying(false, "Stopped at the next user message (turn boundary).");
      return;
    }
    scheduleNext();
  }

  // Each button's counterpart, which takes the focus when the button it was on turns disabled
  // (the last event reached, no later error): a disabled button drops the focus to the page.
  const COUNTERPART = {
    "step-back": "step-forward", "step-forward": "step-back", start: "end", end: "start",
    "prev-error": "next-error", "next-error": "prev-error",
  };

  function updateControls(f) {
    const focused = document.activeElement;  // before a button it was on turns disabled
    const set = function (id, disabled) { const el = $(id); if (el) el.disabled = disabled; };
    set("step-back", f.prev === null);
    set("step-forward", f.next === null);
    set("start", f.seq === f.first);
    set("end", f.seq === f.last);
    set("prev-error", f.prev_error === null);
    set("next-error", f.next_error === null);
    if (focused && focused.disabled && COUNTERPART[focused.id]) {
      const other = $(COUNTERPART[focused.id]);
      const next = other && !other.disabled ? other : $("scrubber");
      if (next) next.focus();
    }
  }

  // The current row is scrolled into view inside the list only: the page stays where the reader
  // put it. (scrollIntoView scrolls every ancestor too: on a phone, where the list is one part
  // of a long page, each step scrolled the page to the row and the step's context out of sight.)
  function scrollCurrentIntoView() {
    const list = $("step-list");
    const row = list && list.querySelector('[aria-current="step"]');
    if (!row) return;
    const box = list.getBoundingClientRect();
    const at = row.getBoundingClientRect();
    if (at.top < box.top) list.scrollTop -= box.top - at.top;
    else if (at.bottom > box.bottom) list.scrollTop += Math.min(at.bottom - box.bottom, at.top - box.top);
  }

  function humanMs(ms) {
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " m " + Math.round(s % 60) + " s";
    return Math.floor(m / 60) + " h " + (m % 60) + " m";
  }

  function act(action) {
    const f = frame();
    if (!f) return;
    switch (action) {
      case "play": return setPlaying(!player.playing);
      case "step-back": setPlaying(false); return stepBy(-1);
      case "step-forward": setPlaying(false); return stepBy(1);
      case "start": setPlaying(false); return go(f.first);
      case "end": setPlaying(false); return go(f.last);
      // Past the last error (or before the first) the button is disabled and e / E say so.
      case "next-error": setPlaying(false); return f.next_error === null ? status("No later error.") : go(f.next_error);
      case "prev-error": setPlaying(false); return f.prev_error === null ? status("No earlier error.") : go(f.prev_error);
    }
  }

  document.addEventListener("click", function (event) {
    if (!onPlayer()) return;
    const button = event.target.closest("[data-action]");
    if (button) {
      event.preventDefault();
      act(button.getAttribute("data-action"));
      return;
    }
    // "show it" for the shown event the filter hides: tick its kind, as the user would; the
    // filters' request (history pushed) shows it. Without the box the link loads the page.
    const show = event.target.closest("[data-show-kind]");
    if (show) {
      const box = document.querySelector('#filters input[name="types"][value="' + CSS.escape(show.getAttribute("data-show-kind")) + '"]');
      if (box) {
        event.preventDefault();
        box.checked = true;
        box.dispatchEvent(new Event("change", { bubbles: true }));
      }
      return;
    }
    // Jumps from the step list, search results, checkpoints: stay on the page, replace history.
    const link = event.target.closest("a[data-seq]");
    if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey && event.button === 0) {
      event.preventDefault();
      // Clicked with a pointer, the link gives up the focus (the arrows went dead on it), before
      // the request leaves: replay.js would hand it to the same link in the new list.
      if (event.detail !== 0) link.blur();
      setPlaying(false);
      go(parseInt(link.getAttribute("data-seq"), 10));
    }
  });

  // A focused control keeps its own keys: Space and Enter press a button or tick a checkbox,
  // arrows move within a select or a text, a link follows. The player's shortcuts act only
  // when no control has focus (or the scrubber has: it is the player's own).
  const CONTROLS = 'input, select, textarea, button, summary, a[href], [contenteditable]:not([contenteditable="false"]), [tabindex]:not([tabindex="-1"]):not(#scrubber)';
  const SCRUBBER_KEYS = { ArrowLeft: "step-back", ArrowDown: "step-back", ArrowRight: "step-forward",
                          ArrowUp: "step-forward", Home: "start", End: "end" };

  document.addEventListener("keydown", function (event) {
    if (!onPlayer() || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.closest && target.closest(CONTROLS)) {
      // Escape hands the keyboard back to the player (and leaves a text field, as before).
      if (event.key === "Escape" && target.blur) target.blur();
      return;
    }
    // The scrubber (role=slider) moves by arrows, Home and End as a slider does; PageUp and
    // PageDown jump ten events.
    if (target.id === "scrubber") {
      const f = frame();
      if (SCRUBBER_KEYS[event.key]) {
        event.preventDefault();
        return act(SCRUBBER_KEYS[event.key]);
      }
      if (f && (event.key === "PageUp" || event.key === "PageDown")) {
        event.preventDefault();
        setPlaying(false);
        return go(f.seq + (event.key === "PageDown" ? 10 : -10));
      }
    }
    const keys = { " ": "play", ArrowLeft: "step-back", ArrowRight: "step-forward", Home: "start",
                   End: "end", e: "next-error", E: "prev-error" };
    if (event.key === "/") {
      const box = $("search-q");
      if (box) { event.preventDefault(); box.focus(); box.select(); }
      return;
    }
    const action = keys[event.key];
    if (action) {
      event.preventDefault();
      act(action);
    }
  });

  // A button or checkbox clicked with a pointer does not keep the focus (as on macOS), so the
  // shortcuts a focused control turns off keep working for mouse users; a keyboard "click"
  // (detail 0: Space or Enter) keeps it, for Tab to go on from there. After the click's own
  // work: a label hands its click, and the focus, to its checkbox only once it has run.
  const POINTER_BLURRED = "#player button, #player input[type=checkbox]";
  document.addEventListener("click", function (event) {
    if (!onPlayer() || event.detail === 0 || !event.target.closest) return;
    if (!event.target.closest(POINTER_BLURRED + ", #player label")) return;
    setTimeout(function () {
      const focused = document.activeElement;
      if (focused && focused.matches && focused.matches(POINTER_BLURRED)) focused.blur();
    }, 0);
  });

  // Every kind ticked is no filter at all: leave `types` out of the URL rather than list them.
  document.addEventListener("htmx:configRequest", function (event) {
    if (!onPlayer() || event.detail.verb !== "get") return;
    const boxes = document.querySelectorAll('#filters input[name="types"]');
    if (boxes.length && Array.prototype.every.call(boxes, function (box) { return box.checked; })) {
      event.detail.parameters.delete("types");
    }
  });

  // Changing the speed or pace while playing takes effect from the next frame.
  document.addEventListener("change", function (event) {
    if (event.target.id === "speed" || event.target.id === "pace") {
      if (player.playing) { clearTimeout(player.timer); scheduleNext(); }
    }
  });

  // ---- scrubber -----------------------------------------------------------------------------
  function samples() {
    const data = readJson("scrubber-data");
    return data && data.samples && data.samples.length > 1 ? data.samples : null;
  }
  function xAt(seq, s) {
    if (seq <= s[0][0]) return s[0][1];
    for (let i = 1; i < s.length; i++) {
      if (seq <= s[i][0]) {
        const span = s[i][0] - s[i - 1][0] || 1;
        return s[i - 1][1] + (s[i][1] - s[i - 1][1]) * (seq - s[i - 1][0]) / span;
      }
    }
    return s[s.length - 1][1];
  }
  function seqAt(x, s) {
    for (let i = 1; i < s.length; i++) {
      if (x <= s[i][1]) {
        const width = s[i][1] - s[i - 1][1];
        if (width <= 0) return Math.max(0, s[i][0]);
        const exact = s[i - 1][0] + (s[i][0] - s[i - 1][0]) * (x - s[i - 1][1]) / width;
        return Math.max(0, Math.min(s[i][0], Math.ceil(exact)));
      }
    }
    return Math.max(0, s[s.length - 1][0]);
  }
  function placeCursor(seq) {
    const s = samples();
    const cursor = $("scrubber-cursor");
    if (!s || !cursor) return;
    const x = (xAt(seq - 1, s) + xAt(seq, s)) / 2;
    cursor.style.left = (x * 100).toFixed(3) + "%";
    const track = $("scrubber");
    const f = frame();
    if (track) {
      track.setAttribute("aria-valuenow", String(seq));
      // Event numbers are shown 1-based (#1 is seq 0), as the server renders them.
      const text = f && f.count === 0 ? "no events yet" : "event " + (seq + 1) + (f ? " of " + f.count : "");
      track.setAttribute("aria-valuetext", text);
    }
  }
  function pointerSeq(event) {
    const track = $("scrubber-track");
    const s = samples();
    if (!track || !s) return null;
    const box = track.getBoundingClientRect();
    const x = Math.max(0, Math.min(1, (event.clientX - box.left) / (box.width || 1)));
    return seqAt(x, s);
  }
  function dragTo(seq, final) {
    if (seq === null) return;
    placeCursor(seq);
    const tip = $("scrubber-tip");
    if (tip) tip.textContent = "#" + (seq + 1);
    player.pendingSeq = seq;
    if (final) {
      clearTimeout(player.dragTimer);
      player.dragTimer = null;
      go(seq);
      return;
    }
    if (!player.dragTimer) {
      player.dragTimer = setTimeout(function () {
        player.dragTimer = null;
        if (player.dragging) go(player.pendingSeq);
      }, DRAG_EVERY_MS);
    }
  }
  document.addEventListener("pointerdown", function (event) {
    const track = event.target.closest && event.target.closest("#scrubber-track");
    if (!track || event.button !== 0) return;
    event.preventDefault();
    setPlaying(false);
    player.dragging = true;
    track.setPointerCapture(event.pointerId);
    dragTo(pointerSeq(event), false);
  });
  document.addEventListener("pointermove", function (event) {
    if (player.dragging) dragTo(pointerSeq(event), false);
  });
  function endDrag(event) {
    if (!player.dragging) return;
    player.dragging = false;
    dragTo(pointerSeq(event), true);
  }
  document.addEventListener("pointerup", endDrag);
  document.addEventListener("pointercancel", function () { player.dragging = false; });

  // ---- live tail ----------------------------------------------------------------------------
  // A live session's player follows new events: its tail (/sessions/<id>/tail/, the API's SSE
  // stream behind the page's own sign-in or share link) tells us the newest seq; when "follow"
  // is on we jump there.
  function startLive(resumeAfter) {
    const root = $("player");
    if (!root || root.getAttribute("data-live") !== "true" || player.source || !window.EventSource) return;
    const f = frame();
    const after = typeof resumeAfter === "number" ? resumeAfter : (f ? f.last_event : -1);
    const url = root.getAttribute("data-tail-url") + "?after=" + encodeURIComponent(after);
    const source = new EventSource(url);
    player.source = source;
    const onEvent = function (message) {
      let seq = null;
      try {
        const data = JSON.parse(message.data);
        seq = typeof data.seq === "number" ? data.seq : (data.event && data.event.seq);
        if (seq === undefined && Array.isArray(data.events) && data.events.length) {
          seq = data.events[data.events.length - 1].seq;
        }
      } catch (e) { return; }
      if (typeof seq !== "number") return;
      player.liveLast = Math.max(player.liveLast, seq);
      const counter = $("live-count");
      if (counter) counter.textContent = String(player.liveLast + 1);
      const follow = $("follow");
      // A burst of events moves the player once per FOLLOW_EVERY_MS, always to the newest.
      if (follow && follow.checked && !player.dragging && !player.playing && !player.followTimer) {
        player.followTimer = setTimeout(function () {
          player.followTimer = null;
          go(player.liveLast);
        }, FOLLOW_EVERY_MS);
      }
    };
    source.onmessage = onEvent;
    ["event", "chunk", "status"].forEach(function (name) { source.addEventListener(name, onEvent); });
    source.addEventListener("end", function (message) {
      source.close();
      player.source = null;
      let data = {};
      try { data = JSON.parse(message.data) || {}; } catch (e) { data = {}; }
      // The stream's time limit (REPLAY_TAIL_MAX_SECONDS) ends it while the session goes on:
      // follow on from where it stopped.
      if (data.reason === "max_duration") {
        const resume = typeof data.resume_after === "number" ? data.resume_after : player.liveLast;
        setTimeout(function () { if (onPlayer()) startLive(resume); }, 1000);
        return;
      }
      if (data.reason === "access_revoked" || data.reason === "session_deleted") {
        // The stream stopped for the viewer, not because the session ended: say which.
        status(data.reason === "access_revoked"
          ? "You can no longer follow this session (your access to it ended)."
          : "This session was deleted.");
        return;
      }
      status("The session ended.");
      // A worker verifies it now: the badge is asked for again, and keeps asking until then.
      const chain = $("chain-badge");
      if (chain && chain.getAttribute("data-badge-url") && window.htmx) {
        htmx.ajax("GET", chain.getAttribute("data-badge-url"), { target: "#chain-badge", swap: "outerHTML" });
      }
      // The header's badges said "Live": the end frame names the status the session ended in.
      const ended = data.status;
      const badge = $("session-status");
      if (badge && typeof ended === "string" && ended && ended !== "live") {
        badge.className = "badge status-" + ended;
        badge.textContent = ended.charAt(0).toUpperCase() + ended.slice(1);
        const liveBadge = $("live-badge");
        if (liveBadge) liveBadge.remove();
        root.setAttribute("data-live", "false");
      }
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    if (onPlayer() && event.target.id === "step-list") afterFrame();
  });
  // A step that failed (the page's alert says so), or was refused (a 4xx swapped in with its
  // reason: base.html counts it a success), holds no presses back, and drops those counted;
  // playback stops there, saying so, rather than stalling with its button still on Pause.
  document.addEventListener("htmx:afterRequest", function (event) {
    const xhr = event.detail.xhr;
    const refused = !!xhr && xhr.status >= 400;
    if (event.detail.elt && event.detail.elt.id === "controls" && (!event.detail.successful || refused)) {
      player.awaiting = false;
      player.pendingSteps = 0;
      const stopped = player.playing ? "Stopped: the next event could not be loaded. " : "";
      if (player.playing) setPlaying(false, stopped.trim());
      if (refused && !$("step-list")) closePlayer(stopped, xhr.status);
    }
  });
  // A refusal took the step list's place (the session deleted, or closed to you, meanwhile):
  // there is nothing left to step through. The controls had stayed on and went nowhere, without
  // a word; they are turned off, and the status line says what to do.
  function closePlayer(stopped, code) {
    const form = $("controls");
    if (form) {
      Array.prototype.forEach.call(form.querySelectorAll("button, input, select"), function (control) {
        control.disabled = true;
      });
    }
    status(stopped + "This session can no longer be shown (HTTP " + code + "; the reason is where the events were). Reload the page.");
  }
  document.addEventListener("htmx:historyRestore", function () {
    setPlaying(false);
    if (player.source) { player.source.close(); player.source = null; }
    if (onPlayer()) { afterFrame(); startLive(); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    if (!onPlayer()) return;
    afterFrame();
    startLive();
    focusComment();
  });
  // ---- comments ---------------------------------------------------------------------------
  // "copy link to this moment": the Clipboard API where the page may use it (https or
  // localhost); elsewhere, or when refused, the link is shown in a field to copy by hand.
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest("[data-copy-link]");
    if (!button) return;
    const url = button.getAttribute("data-copy-link");
    const box = button.parentElement.querySelector(".moment-url");
    const said = button.parentElement.querySelector(".copy-status");
    const showField = function () {
      if (!box) return;
      box.hidden = false;
      box.focus();
      box.select();
      if (said) said.textContent = "Copy the link from the field.";
    };
    if (!navigator.clipboard || !window.isSecureContext) return showField();
    navigator.clipboard.writeText(url).then(function () {
      if (said) said.textContent = "Link copied.";
    }, showField);
  });
  // A permalink (#c-K) opens the player at its step; bring its thread into view and focus.
  function focusComment() {
    const match = /^#c-\d+$/.test(location.hash) && document.getElementById(location.hash.slice(1));
    if (!match) return;
    match.scrollIntoView({ block: "center" });
    match.focus({ preventScroll: true });
  }
  // ---- tour mode --------------------------------------------------------------------------
  // "Play to next stop": the next stop in this session is played to at the chosen pace (the
  // playback above, idle gaps compressed as always) and paused at; one in another session is
  // opened there. The `stop` the #controls form sends (#tour-stop) becomes the next stop's
  // with the frame that reaches it, so its answer brings that stop's narration panel (out of
  // band) and the URL says where the tour is.
  function markStop(number) {
    const input = $("tour-stop");
    if (input) input.value = String(number);
  }
  function playToNextStop() {
    const tour = readJson("tour-data");
    const f = frame();
    if (!tour || !tour.next || !f) return;
    const next = tour.next;
    if (!next.here) { setPlaying(false); window.location.assign(next.url); return; }
    // Leaving the stop is a step in the browser's history, as its "Stop N →" link is: Back
    // returns to this stop, not to the page before the tour (the frames on the way replace
    // the new entry, as playback's frames always do).
    if (next.seq <= f.seq) { setPlaying(false); markStop(next.number); pushNextFrame = true; go(next.seq); return; }
    tourStop = { number: next.number, seq: next.seq };
    pushNextFrame = true;
    setPlaying(true);
  }
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!event.detail.successful) pushNextFrame = false; // a failed frame moved nowhere
  });
  document.addEventListener("htmx:beforeHistoryUpdate", function (event) {
    if (!pushNextFrame || !event.detail.history) return;
    pushNextFrame = false;
    event.detail.history.type = "push";
  });
  // While it plays to the next stop, the button is the pause (as #play is): a second press, or
  // Space on it, pauses there instead of starting again.
  function showTourPlaying() {
    const button = $("tour-play-next");
    if (!button) return;
    const on = player.playing && tourStop !== null;
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.textContent = on ? "❚❚ Pause" : "▶ Play to next stop";
  }
  document.addEventListener("click", function (event) {
    const button = event.target.closest && event.target.closest('[data-tour-action="play-to-next"]');
    if (!button || !onPlayer()) return;
    event.preventDefault();
    if (player.playing && tourStop !== null) setPlaying(false);
    else playToNextStop();
  });

  // Exposed for the charts: clicking a point jumps the player.
  document.addEventListener("replay:goto", function (event) {
    setPlaying(false);
    go(event.detail.seq);
  });
})();
