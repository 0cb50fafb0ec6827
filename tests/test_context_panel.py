"""The context panel and the step list as a newcomer reads them (issue 19): values as JSON, never
Python reprs; no numbered "none"; the action code is code; unpriced cost is *unpriced*, never
$0.0000; one time format (+1m 23.4s, ISO 8601 on hover); negative durations flagged; the agent's
text isolated and escaped; plotly hover text escaped."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from rlm_code.rlm.session_replay import SessionRecorder

from sessions_app.canonical import Kind, StateChange
from sessions_app.ingest.importing import import_file
from sessions_app.models import Event, Project, Session
from sessions_app.verification import verify_session

from .builders_dashboard import _event, build_session, logged_in, user  # noqa: F401
from .conftest import T0

FIXTURES = Path(__file__).parent / "fixtures"
XSS_TOOL = "<img src=x onerror=alert(1)>"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: reverses the text after it until the paragraph ends


def page(client, session: Session, step: int) -> str:
    return client.get(reverse("sessions:player", args=[session.pk]), {"step": step}).content.decode()


def panel_of(html_text: str) -> str:
    start = html_text.index('<section id="context-panel"')
    return html_text[start : html_text.index("</section>\n", html_text.index("Pending approvals", start))]


def step_list_of(html_text: str) -> str:
    start = html_text.index('<section id="step-list"')
    return html_text[start : html_text.index("</ol>", start)]


def row_of(html_text: str, seq: int) -> str:
    rows = step_list_of(html_text)
    start = rows.index(f'data-seq="{seq}"')
    return rows[start : rows.index("</li>", start)]


def text_of(fragment: str) -> str:
    """What a reader sees: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def plain(fragment: str) -> str:
    """The text of highlighted code or JSON: tags dropped without adding spaces, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def without_code(fragment: str) -> str:
    # The agent's Python code may well say None and True: it is code, not a value shown.
    return re.sub(r'<pre class="code python">.*?</pre>', "", fragment, flags=re.S)


def imported(path: Path) -> Session:
    (outcome,) = import_file(path=path, project=Project.get_default())
    return outcome.session


@pytest.fixture
def rlm_session(tmp_path) -> Session:
    """An rlm-code session (rlm-code's own recorder) that prices nothing, with variables and
    step outputs holding None/True/dicts, as the recorder writes them."""
    path = tmp_path / "reprs.jsonl"
    recorder = SessionRecorder(session_id="s", run_id="reprs", task="t", environment="e", model="gpt-4o-mini",
                               output_path=path)  # fmt: skip
    recorder.record_step_start(1)
    recorder.record_llm_request("prompt", model="gpt-4o-mini")
    recorder.record_llm_response("answer", tokens_in=10, tokens_out=5)
    recorder.record_action({"action": "run_python", "code": "flags = {'a': None, 'ok': True}"}, rationale="why")
    recorder.record_result({"success": True, "output": {"a": None, "ok": True}}, reward=1.0, success=True)
    recorder.record_variable_update("flags", {"a": None, "ok": True})
    recorder.record_variable_update("done", True)
    recorder.record_variable_update("nothing", None)
    recorder.record_variable_update("word", "True")  # a string: stays the string "True"
    recorder.record_memory_update(["", "the real note", {"seen": None}])
    recorder.record_step_end({"action": "run_python", "code": "flags = {'a': None, 'ok': True}"},
                             {"success": True, "output": {"a": None, "ok": True}}, reward=1.0, success=True)  # fmt: skip
    recorder.end_session()
    return imported(path)


def seq_of(session: Session, **where) -> int:
    return Event.objects.filter(session=session, **where).order_by("seq").values_list("seq", flat=True)[0]


# 1. Values as formatted JSON, never Python reprs


def test_variables_memory_and_step_output_show_as_json_never_python_reprs(logged_in, rlm_session):
    # Before the step ends, the variables are the recorder's previews: str(value).
    before_end = seq_of(rlm_session, source_type="memory_update")
    panel = without_code(panel_of(page(logged_in, rlm_session, before_end)))
    shown = plain(panel)
    assert "{'a': None" not in shown and "None" not in shown and "True," not in shown
    assert '"a": null' in shown and '"ok": true' in shown  # the dict as indented JSON
    assert re.search(
        r"<th><bdi>done</bdi></th><td><pre class=\"value json\" dir=\"ltr\"><span class=\"tok-kw\">true", panel
    )
    assert re.search(r"<th><bdi>nothing</bdi></th><td><pre[^>]*><span class=\"tok-kw\">null", panel)
    assert '<bdi class="tok-str">"True"</bdi>' in panel  # a string variable stays a string
    # At the step's end: its output (a dict in rlm-code's StepState) is JSON too.
    closing = seq_of(rlm_session, kind=Kind.STEP_END)
    closed = plain(without_code(panel_of(page(logged_in, rlm_session, closing))))
    assert "Output" in closed and '"a": null' in closed and "{'a': None" not in closed and "None" not in closed


def test_non_text_step_fields_show_as_json(logged_in, db):
    state = {"step": 0, "action_type": "code", "action_code": {"op": None}, "action_rationale": {"why": True},
             "success": False, "output": [None, True], "error": {"code": None}, "reward": None, "tokens_used": 1}  # fmt: skip
    session = build_session([_event(0, Kind.STEP_END, step=0, step_state=state)], source_session_id="odd")
    shown = plain(panel_of(page(logged_in, session, 0)))
    assert "None" not in shown and "True" not in shown
    assert '"op": null' in shown and '"why":true' in shown and '"code": null' in shown and "true" in shown


# 2. No "1. none"


def test_empty_sections_say_none_once_and_blank_notes_are_left_out(logged_in, rlm_session):
    first = panel_of(page(logged_in, rlm_session, 0))
    assert '<li class="muted">none</li>' not in first and '<tr><td class="muted">none' not in first
    # Memory notes, variables, LLM history, tool results and pending approvals: each says none once.
    assert first.count('<p class="muted">none</p>') == 5
    notes = panel_of(page(logged_in, rlm_session, seq_of(rlm_session, source_type="memory_update")))
    listed = re.search(r'<ol class="notes">(.*?)</ol>', notes, re.S).group(1)
    assert listed.count("<li>") == 2  # the blank note is not a numbered empty line
    assert "Memory notes (2)" in notes


# 3. The action code is code


def test_llm_step_of_agentlens_shows_no_model_name_as_code(logged_in, db):
    sessions = import_file(path=FIXTURES / "agentlens" / "two_sessions.ndjson", project=Project.get_default())
    deploy = next(
        o.session for o in sessions if "deploy" in (o.session.agent_id or o.session.task + str(o.session.metadata))
    )
    llm_step = Event.objects.get(session=deploy, step_pos=0)
    assert llm_step.kind == Kind.LLM_RESPONSE
    panel = panel_of(page(logged_in, deploy, llm_step.seq))
    assert "Action code" not in panel  # it was the model's name, highlighted as Python
    assert "<bdi>claude-sonnet-4-20250514</bdi>" in panel  # the model stays the event's tool
    tool_step = Event.objects.get(session=deploy, step_pos=1)
    code = re.search(
        r"<h4>Action code</h4><pre class=\"code python\">(.*?)</pre>",
        panel_of(page(logged_in, deploy, tool_step.seq)),
        re.S,
    )
    assert code and plain(code.group(1)) == 'read_file({"path":"config/deploy.yaml"})'


# 4. Unpriced cost is *unpriced*, never $0.0000


def test_a_session_without_any_price_is_unpriced_everywhere(logged_in, rlm_session):
    assert (rlm_session.priced_events, rlm_session.cost_usd) == (0, 0.0)
    response = page(logged_in, rlm_session, 2)
    assert "$0.0000" not in response
    header = response[: response.index('id="scrubber"')]
    assert re.search(r"<dt>Cost</dt><dd><em class=\"unpriced\"[^>]*>unpriced</em></dd>", header)
    assert re.search(r"<dt>Cost so far</dt><dd><em class=\"unpriced\"[^>]*>unpriced</em></dd>", panel_of(response))
    listing = logged_in.get(reverse("sessions:list")).content.decode()
    row = listing[listing.index(f'data-session="{rlm_session.pk}"') :]
    assert "$0.0000" not in row[: row.index("</tr>")] and ">unpriced</em>" in row[: row.index("</tr>")]
    # The API says so too: a total of 0 with costKnown false (a client could not tell it from $0).
    [listed] = [r for r in logged_in.get("/api/sessions").json()["sessions"] if r["id"] == rlm_session.pk]
    assert (listed["totalCost"], listed["costKnown"], listed["unpricedEvents"]) == (0.0, False, 0)
    summary = logged_in.get(f"/api/sessions/{rlm_session.pk}/summary").json()
    assert (summary["totalCost"], summary["costKnown"]) == (0.0, False)


def test_unpriced_events_are_marked_in_the_step_list_and_a_partly_priced_total_says_so(logged_in, db):
    events = [
        _event(0, Kind.LLM_RESPONSE, tool="gpt-4o", tokens=100, cost_usd=0.01),
        _event(1, Kind.LLM_RESPONSE, tool="mystery-model", tokens=1200, cost_unpriced=True),
        _event(2, Kind.COST, tool="local", cost_usd=0.0),  # a real $0: a price of nothing
    ]
    session = build_session(events, source_session_id="mixed")
    assert (session.priced_events, session.unpriced_events) == (2, 1)
    response = page(logged_in, session, 1)
    assert ">unpriced</em>" in row_of(response, 1) and "$" not in text_of(row_of(response, 1))
    assert "$0.0100" in row_of(response, 0) and "$0.0000" in row_of(response, 2)
    assert "· " in panel_of(response) and "cost unknown" not in panel_of(response)
    header = response[: response.index('id="scrubber"')]
    assert re.search(r"\$0\.0100 <em class=\"unpriced\" title=\"1 event used[^\"]*\">\+ unpriced</em>", header)
    # The running cost says so too: it covers the priced events only (the walkthrough read it as the whole).
    said = r"<dt>Cost so far</dt><dd>\$0\.0100 <em class=\"unpriced\" title=\"1 event of this session used tokens with no known price: not in this total\">priced events only</em>"
    assert re.search(said, panel_of(response))
    listing = logged_in.get(reverse("sessions:list")).content.decode()
    row = listing[listing.index(f'data-session="{session.pk}"') :]
    assert "+ unpriced" in row[: row.index("</tr>")]
    [listed] = [r for r in logged_in.get("/api/sessions").json()["sessions"] if r["id"] == session.pk]
    assert (listed["totalCost"], listed["costKnown"], listed["unpricedEvents"]) == (pytest.approx(0.01), True, 1)


def test_a_child_of_an_unpriced_session_has_unpriced_own_cost(logged_in, db):
    events = [
        _event(0, Kind.CHILD_SPAWN, pair_id="kid", child_id="kid", payload={"task": "look"}),
        _event(1, Kind.LLM_RESPONSE, depth=1, agent_id="kid", tokens=30, cost_unpriced=True, tool="m"),
        _event(2, Kind.CHILD_RESULT, pair_id="kid", child_id="kid", payload={"result_preview": "42"}),
    ]
    session = build_session(events, source_session_id="kids")
    panel = panel_of(page(logged_in, session, 2))
    assert "own cost $0.0000" not in panel and re.search(r"own cost <em class=\"unpriced\"", panel)


def test_the_writer_counts_priced_events_and_verification_checks_them(db):
    events = [_event(0, Kind.LLM_RESPONSE, cost_usd=0.5), _event(1, Kind.LLM_RESPONSE, tokens=3, cost_unpriced=True)]
    session = build_session(events, source_session_id="counted")
    assert (session.priced_events, session.unpriced_events) == (1, 1)
    assert verify_session(session=session).valid
    Session.objects.filter(pk=session.pk).update(priced_events=0)
    session.refresh_from_db()
    findings = verify_session(session=session).findings
    assert any(f["field"] == "session.priced_events" for f in findings)


def test_the_cost_chart_of_an_unpriced_session_draws_no_zero_line(logged_in, rlm_session):
    response = logged_in.get(reverse("sessions:charts", args=[rlm_session.pk]), HTTP_HX_REQUEST="true")
    data = chart_data(response.content.decode())
    cost = data["figures"]["cost"]
    assert cost["data"] == [] and "unpriced" in cost["layout"]["annotations"][0]["text"]


# 5. One time format: +1m 23.4s since the session's start, ISO 8601 UTC on hover


def test_times_are_relative_to_the_session_start_with_the_utc_time_on_hover(logged_in, db):
    events = [_event(0, Kind.SESSION_START), _event(1, Kind.NOTE, timestamp=T0 + timedelta(seconds=83.4)),
              _event(2, Kind.NOTE, timestamp=T0 + timedelta(hours=2, minutes=5, seconds=3.45))]  # fmt: skip
    session = build_session(events, source_session_id="clock")
    response = page(logged_in, session, 1)
    stamp = '<time datetime="2026-02-08T10:31:23.400000Z" title="2026-02-08T10:31:23.400000Z">+1m 23.4s</time>'
    assert stamp in row_of(response, 1) and stamp in panel_of(response)
    assert "<dt>Elapsed</dt><dd>+1m 23.4s</dd>" in panel_of(response)  # the same format
    assert re.search(r'<output id="step-status"[^>]*>.*· \+1m 23\.4s</output>', response)
    assert ">+0.0s</time>" in row_of(response, 0)
    assert ">+2h 05m 03.5s</time>" in row_of(response, 2)
    assert "10:31:23.400<" not in step_list_of(response)  # the old HH:MM:SS.mmm clock


# 6. Negative durations flagged


def test_negative_durations_and_clocks_going_back_are_flagged_not_shown_raw(logged_in, db):
    events = [
        _event(0, Kind.SESSION_START),
        _event(1, Kind.TOOL_CALL, pair_id="t", tool="fetch"),
        # The answer says it took -2.1 s (its end stamped before its start).
        _event(2, Kind.TOOL_RESPONSE, pair_id="t", tool="fetch", duration_ms=-2100.0),
        # A clock that went back: stamped 2.1 s before the session's start.
        _event(3, Kind.NOTE, timestamp=T0 - timedelta(seconds=2.1)),
        _event(4, Kind.STEP_END, step=0, step_state={"step": 0, "success": True, "duration_ms": -2100.0}),
    ]
    session = build_session(events, source_session_id="backwards")
    response = page(logged_in, session, 2)
    flagged = "⚠ negative duration (-2.1 s): timestamps out of order"
    assert flagged in text_of(row_of(response, 2)) and flagged in text_of(panel_of(response))
    assert "-2100 ms" not in response
    back = page(logged_in, session, 3)
    assert re.search(r'<span class="negative-duration"[^>]*>⚠ -2\.1s</span>', row_of(back, 3))
    assert "+-" not in back
    assert flagged in text_of(panel_of(page(logged_in, session, 4)))


# 7. The agent's text isolated and escaped


def test_agent_text_in_the_panel_is_isolated_and_escaped(logged_in, db):
    tool = f"{RLO}{XSS_TOOL}"
    events = [
        _event(0, Kind.TOOL_CALL, pair_id="x", tool=tool, agent_id=f"agent{RLO}7", payload={"arguments": {"k": tool}}),
        _event(
            1,
            Kind.TOOL_RESPONSE,
            pair_id="x",
            tool=tool,
            payload={"result": f"{RLO}done"},
            state_change=StateChange(variables={f"v{RLO}": tool}, memory=[f"{RLO}{XSS_TOOL}"]),
        ),  # fmt: skip
    ]
    session = build_session(events, source_session_id="bidi")
    panel = panel_of(page(logged_in, session, 1))
    assert "<img" not in panel and "&lt;img src=x onerror=alert(1)&gt;" in panel
    escaped = html.escape(tool, quote=True)
    assert f"· <bdi>{escaped}</bdi></h3>" in panel  # the event's tool
    assert f"<th><bdi>v{RLO}</bdi></th>" in panel  # a variable's name
    assert f'<pre class="value" dir="auto">{RLO}&lt;img' in panel  # a memory note
    assert f"<bdi>{escaped}</bdi></a> <bdi>{RLO}done</bdi>" in panel  # a tool result's entry
    first = panel_of(page(logged_in, session, 0))
    assert f"agent <bdi>agent{RLO}7</bdi>" in first
    assert f'<bdi class="tok-str">"{RLO}&lt;img' in first  # a string inside the payload's JSON


# 8. plotly hover text escaped


def chart_data(html_text: str) -> dict:
    found = re.search(r'<script id="chart-data" type="application/json">(.*?)</script>', html_text, re.S)
    assert found
    return json.loads(found.group(1))


def test_chart_hover_text_holds_tool_names_escaped(logged_in, db):
    events = [
        _event(0, Kind.TOOL_CALL, pair_id="x", tool=XSS_TOOL),
        _event(1, Kind.TOOL_RESPONSE, pair_id="x", tool=XSS_TOOL),
        _event(2, Kind.LLM_CALL, pair_id="l", tool="<b>model</b>"),
        _event(3, Kind.LLM_RESPONSE, pair_id="l", tool="<b>model</b>", cost_usd=0.1),
    ]
    session = build_session(events, source_session_id="charts")
    response = logged_in.get(reverse("sessions:charts", args=[session.pk]), HTTP_HX_REQUEST="true")
    latency = {trace["name"]: trace for trace in chart_data(response.content.decode())["figures"]["latency"]["data"]}
    assert latency["tool calls"]["text"] == ["&lt;img src=x onerror=alert(1)&gt;"]
    assert latency["LLM calls"]["text"] == ["&lt;b&gt;model&lt;/b&gt;"]
    assert "<img" not in response.content.decode()


# The offline viewer of a bundle says unpriced too


def test_a_bundle_manifest_says_whether_its_session_had_prices(db, rlm_session):
    from sessions_app.bundles import session_summary

    totals = session_summary(rlm_session, rlm_session.event_count)["totals"]
    assert (totals["priced_events"], totals["unpriced_events"]) == (0, 0)


# 8. A large state is cut when the frame is built, not held whole while the page renders


def test_large_variables_and_notes_are_cut_when_the_frame_is_built_and_the_writers_state_is_not_read(logged_in, user):
    from sessions_app.access import Actor, session_for
    from sessions_app.replay.frames import SHOWN_VALUE_CHARS, ClippedValue, frame_at

    big = "v" * 200_000
    change = StateChange(variables={"big": big, "word": "2"}, memory=[big, {"n": 1}])
    session = build_session([_event(0, Kind.NOTE), _event(1, Kind.NOTE, state_change=change), _event(2, Kind.NOTE)])
    frame = frame_at(session=session, seq=2, kinds=[])
    # The frame holds the panel's text of each value, cut: a page's template context is a
    # reference cycle, and a whole 6 MB variable in it stayed until a garbage collection ran.
    assert [(name, type(value)) for name, value in frame.variables] == [("big", ClippedValue), ("word", ClippedValue)]
    assert all(len(value.text) < SHOWN_VALUE_CHARS + 40 for _name, value in frame.variables)
    assert frame.variables[0][1].text.endswith(f"… ({len(big) + 2} characters)")  # its JSON: quoted
    assert frame.variables[1][1] == ClippedValue('"2"', is_json=True)  # a string variable stays a string
    assert [(note.is_json, len(note.text) < SHOWN_VALUE_CHARS + 40) for note in frame.memory] == [
        (False, True), (True, True)
    ]  # fmt: skip
    shown = panel_of(page(logged_in, session, 2))
    assert f"… ({len(big)} characters)" in shown and f"… ({len(big) + 2} characters)" in plain(shown)
    assert '<bdi class="tok-str">"2"</bdi>' in shown and big[:2000] not in shown
    # The writer's saved state (as large as the variables) is not read for a session a caller opens.
    opened = session_for(Actor(user=user), session.pk)
    assert "ingest_state" in opened.get_deferred_fields()
    assert opened.ingest_state["variables"]["big"] == big  # read when asked for


def test_a_player_page_leaves_no_stack_frame_in_reference_cycles(logged_in, tmp_path):
    # A FieldError Django caught and kept while resolving "problems__0" (the import's first
    # problems, read for an imported session) held every frame of the request, the decoded step
    # among them, until a garbage collection: 35 MB a view of a session with large variables.
    import gc

    from sessions_app.ingest.importing import import_local_file

    copy = tmp_path / "uploaded.ndjson"
    copy.write_bytes((FIXTURES / "agentlens" / "two_sessions.ndjson").read_bytes())
    uploaded = import_local_file(path=copy, project=Project.get_default())[0].session
    assert uploaded.import_job_id is not None
    page(logged_in, uploaded, 1)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        page(logged_in, uploaded, 2)
        gc.collect()
        kept = [o.f_code.co_name for o in gc.garbage if type(o).__name__ == "frame"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert kept == []
