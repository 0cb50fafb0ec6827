"""OpenTelemetry ingest: POST /v1/traces (OTLP/HTTP) to sessions, through the real SDK and by hand."""

from __future__ import annotations

import gzip
import logging
from datetime import timedelta

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, ResourceMetrics, ScopeMetrics
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import StatusCode

from sessions_app import jobs
from sessions_app.formats import otlp
from sessions_app.ingest.traces import settle_traces
from sessions_app.models import OtlpSpan, OtlpTrace, Project, Role, Session

from .builders_teams import key_of, member

PROTOBUF = "application/x-protobuf"


@pytest.fixture(autouse=True)
def _settled_together(request, caplog):
    # The sessions of a settling transaction are written together (writer.shared_writes); if
    # that fails, the transaction is settled again one session at a time, with the same end
    # result, so only the log tells the two apart: a test that does not expect the fallback
    # (fixture `falls_back`) fails when it happened.
    caplog.set_level(logging.INFO, logger="replay.otlp")
    yield
    if "falls_back" not in request.fixturenames:
        assert not [r for r in caplog.records if "together failed" in r.getMessage()]


@pytest.fixture
def falls_back() -> None:
    """The test makes a settling transaction fail while its sessions are written together."""


@pytest.fixture
def project(db) -> Project:
    return Project.objects.create(name="Agents", slug="agents")


@pytest.fixture
def key(project) -> str:
    return key_of(member("agent-maintainer", project, Role.MAINTAINER), project=project)


@pytest.fixture
def api(key) -> Client:
    return Client(headers={"authorization": f"Bearer {key}"})


def settle_now() -> None:
    """What the scheduled job does once the quiet period has passed."""
    settle_traces(quiet_seconds=0, orphan_seconds=0, now=timezone.now() + timedelta(seconds=1))


def replay(api: Client, session_id: int) -> list[dict]:
    response = api.get(f"/api/sessions/{session_id}/replay", {"limit": 1000})
    assert response.status_code == 200, response.content
    return response.json()["steps"]


def otlp_sessions(api: Client) -> dict[str, dict]:
    rows = api.get("/api/sessions", {"format": "otlp"}).json()["sessions"]
    return {row["sourceSessionId"]: row for row in rows}


# --- the real SDK ---------------------------------------------------------------------------


def _run_agent(tracer) -> None:
    """A small agent run: the planner answers with two model calls around a failing tool call
    and a sub-agent (the booker) that makes a model call of its own."""
    user = orjson.dumps([{"role": "user", "parts": [{"type": "text", "content": "Plan a trip to Lisbon"}]}]).decode()
    with tracer.start_as_current_span("invoke_agent planner", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": "conv-lisbon", "gen_ai.input.messages": user,
        "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Booked: Lisbon, 3 nights"}]}]).decode(),
    }):  # fmt: skip
        with tracer.start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.provider.name": "openai",
            "gen_ai.conversation.id": "conv-lisbon",
            "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 30,
        }) as chat:  # fmt: skip
            # The older conventions: prompt and completion as span events.
            chat.add_event("gen_ai.user.message", {"content": "Plan a trip to Lisbon"})
            chat.add_event("gen_ai.choice", {"gen_ai.event.content": orjson.dumps({
                "index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
                    {"id": "call_weather", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]}}).decode()})  # fmt: skip
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_weather", "gen_ai.tool.call.arguments": '{"city": "Lisbon"}',
        }) as tool:  # fmt: skip
            tool.record_exception(TimeoutError("weather service timed out"))
            tool.set_status(StatusCode.ERROR, "weather service timed out")
        with tracer.start_as_current_span("invoke_agent booker", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "booker",
            "gen_ai.input.messages": orjson.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "Book 3 nights in Lisbon"}]}]).decode(),
        }):  # fmt: skip
            with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 8,
                "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "Hotel Alfama, 3 nights"}], "finish_reason": "stop"}]).decode(),
            }):  # fmt: skip
                pass
        with tracer.start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 12,
            "gen_ai.input.messages": orjson.dumps([{"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "call_weather", "response": "timeout"}]}]).decode(),
            "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "Booked: Lisbon, 3 nights"}], "finish_reason": "stop"}]).decode(),
        }):  # fmt: skip
            pass


def test_the_opentelemetry_sdk_exports_an_agent_run_that_replays_with_tokens_pairs_errors_and_a_sub_agent(
    live_server, project, key, api
):
    provider = TracerProvider(resource=Resource.create({"service.name": "trip-planner"}))
    exporter = OTLPSpanExporter(
        endpoint=f"{live_server.url}/v1/traces", headers={"Authorization": f"Bearer {key}"},
        compression=Compression.Gzip, timeout=10,
    )  # fmt: skip
    # Each span is exported as it ends: children first, one request each, the agent's last.
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run_agent(provider.get_tracer("trip-planner"))
    provider.shutdown()

    sessions = otlp_sessions(api)
    top = sessions["conv-lisbon"]
    assert top["status"] == "live" and top["eventCount"] == 0  # waiting for its trace to settle
    assert OtlpSpan.objects.filter(record__isnull=False).count() == 6
    settle_now()

    sessions = otlp_sessions(api)
    top = sessions["conv-lisbon"]
    assert top["status"] == "completed"
    assert top["agentId"] == "planner" and top["environment"] == "trip-planner"
    assert top["task"] == "Plan a trip to Lisbon" and top["model"] == "gpt-4o"
    steps = replay(api, top["id"])
    kinds = [step["event"]["kind"] for step in steps]
    assert kinds == [
        "user_message", "llm_call", "llm_response", "tool_call", "tool_error", "child_spawn", "child_result",
        "llm_call", "llm_response", "agent_message",
    ]  # fmt: skip
    events = [step["event"] for step in steps]
    # Tokens: both of the planner's model calls (the sub-agent's are its own session's).
    assert events[2]["tokens"] == 150 and events[8]["tokens"] == 212
    assert top["totalTokens"] == 362
    assert events[1]["payload"]["messages"][-1]["content"] == "Plan a trip to Lisbon"
    assert events[2]["payload"]["toolCalls"][0] == {
        "id": "call_weather", "name": "get_weather", "arguments": {"city": "Lisbon"}
    }  # fmt: skip
    assert events[2]["tool"] == "gpt-4o-2024-08-06" and events[1]["tool"] == "gpt-4o"
    # The tool call pairs with its error by gen_ai.tool.call.id; the error says why.
    call, error = steps[3], steps[4]
    assert call["event"]["pairId"] == "call_weather" and call["pairedEvent"]["seq"] == error["event"]["seq"]
    assert error["event"]["isError"] is True and error["event"]["payload"]["error"] == "weather service timed out"
    assert error["event"]["payload"]["exception"]["type"] == "TimeoutError"
    assert top["errorEvents"] == 1
    assert events[-1]["payload"]["text"] == "Booked: Lisbon, 3 nights"
    # Events land in the order their spans started, each span once.
    times = [e["timestamp"] for e in events]
    assert times == sorted(times)

    # The sub-agent is a child session of its own, named by its parent's spawn.
    child = next(row for key_, row in sessions.items() if key_ != "conv-lisbon")
    assert child["parentId"] == top["id"] and child["agentId"] == "booker"
    assert steps[5]["event"]["payload"]["sessionId"] == child["id"]
    assert steps[5]["event"]["payload"]["task"] == "Book 3 nights in Lisbon"
    assert steps[5]["pairedEvent"]["seq"] == steps[6]["event"]["seq"]
    child_steps = replay(api, child["id"])
    assert [s["event"]["kind"] for s in child_steps] == ["user_message", "llm_call", "llm_response", "status"]
    assert child_steps[2]["event"]["payload"]["completion"] == "Hotel Alfama, 3 nights"
    assert child["totalTokens"] == 48 and child["status"] == "completed"
    detail = api.get(f"/api/sessions/{child['id']}").json()
    assert detail["session"]["parentId"] == top["id"]

    # The player links the two: the child names its parent, the parent's panel of child agents
    # opens the child's session.
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="agent-maintainer"))
    page = browser.get(f"/sessions/{child['id']}/").content.decode()
    assert f'started by <a href="/sessions/{top["id"]}/">session {top["id"]}</a>' in page
    page = browser.get(f"/sessions/{top['id']}/", {"step": steps[6]["event"]["seq"]}).content.decode()
    assert f'<a class="child-session" href="/sessions/{child["id"]}/">its session</a>' in page


# --- by hand: encodings, order, duplicates --------------------------------------------------

TRACE = "5b8efff798038103d269b633813fc60c"
T0 = 1_770_000_000_000_000_000  # ns


def attrs(**values) -> list[KeyValue]:
    out = []
    for name, value in values.items():
        key = name.replace("__", ".")
        if isinstance(value, bool):
            any_value = AnyValue(bool_value=value)
        elif isinstance(value, int):
            any_value = AnyValue(int_value=value)
        else:
            any_value = AnyValue(string_value=value)
        out.append(KeyValue(key=key, value=any_value))
    return out


def span(span_id: str, parent: str, name: str, start_ms: int, end_ms: int, *, error: str = "", **attributes) -> Span:
    return Span(
        trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(span_id), parent_span_id=bytes.fromhex(parent),
        name=name, start_time_unix_nano=T0 + start_ms * 1_000_000, end_time_unix_nano=T0 + end_ms * 1_000_000,
        attributes=attrs(**attributes),
        status=Status(code=Status.STATUS_CODE_ERROR, message=error) if error else Status(),
    )  # fmt: skip


def request(*spans: Span) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])])


AGENT = "a000000000000001"
SPANS = {
    "agent": span(AGENT, "", "invoke_agent helper", 0, 1000, gen_ai__operation__name="invoke_agent",
                  gen_ai__agent__name="helper"),
    "chat1": span("b000000000000001", AGENT, "chat m", 100, 200, gen_ai__operation__name="chat",
                  gen_ai__request__model="m", gen_ai__usage__input_tokens=5, gen_ai__usage__output_tokens=1),
    "tool": span("b000000000000002", AGENT, "execute_tool t", 300, 400, gen_ai__operation__name="execute_tool",
                 gen_ai__tool__name="t", gen_ai__tool__call__id="c1"),
    "chat2": span("b000000000000003", AGENT, "chat m", 500, 600, gen_ai__operation__name="chat",
                  gen_ai__request__model="m"),
}  # fmt: skip


def post(api: Client, body: bytes, *, content_type: str = PROTOBUF, **headers):
    return api.post("/v1/traces", body, content_type=content_type, headers=headers)


def test_split_out_of_order_and_repeated_batches_land_once_each_in_start_order(api, project):
    # The root arrives last, a retry repeats a batch, and the requests cut the trace anywhere.
    for batch in (["chat2", "tool"], ["chat2", "tool"], ["chat1"], ["agent", "chat1"]):
        response = post(api, request(*(SPANS[n] for n in batch)).SerializeToString())
        assert response.status_code == 200 and response["Content-Type"] == PROTOBUF
        assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    session = Session.objects.get(source_format="otlp")
    assert session.status == "live" and session.event_count == 0
    # Not yet: the trace is still within its quiet period.
    settle_traces(quiet_seconds=10, orphan_seconds=300)
    assert Session.objects.get(pk=session.pk).event_count == 0
    settle_now()

    steps = replay(api, session.pk)
    assert [(s["event"]["kind"], s["event"]["payload"]["span"]["spanId"][-1]) for s in steps] == [
        ("status", "1"), ("llm_call", "1"), ("llm_response", "1"), ("tool_call", "2"), ("tool_response", "2"),
        ("llm_call", "3"), ("llm_response", "3"), ("status", "1"),
    ]  # fmt: skip
    assert [s["event"]["seq"] for s in steps] == list(range(8))
    session.refresh_from_db()
    assert session.status == "completed" and session.tokens == 6 and session.step_count == 3

    # A straggler after the trace settled (a retried export of an old span, and one new span
    # that started before the last events): appended after them, once, marked late; the chain holds.
    late = span("b000000000000004", AGENT, "chat m", 700, 800, gen_ai__operation__name="chat",
                gen_ai__request__model="m")  # fmt: skip
    assert post(api, request(SPANS["chat1"], late).SerializeToString()).status_code == 200
    assert Session.objects.get(pk=session.pk).status == "live"
    settle_now()
    steps = replay(api, session.pk)
    assert len(steps) == 10 and [s["event"]["kind"] for s in steps[-2:]] == ["llm_call", "llm_response"]
    assert steps[-1]["event"]["payload"]["span"]["late"] is True
    verified = api.post(f"/api/sessions/{session.pk}/verify").json()
    assert verified["chainValid"] is True and verified["findings"] == []
    assert Session.objects.get(pk=session.pk).status == "completed"


def test_the_scheduled_job_settles_quiet_traces_and_waits_for_a_missing_root(api, project, settings):
    settings.OTLP_SETTLE_SECONDS = 0
    settings.OTLP_ORPHAN_SECONDS = 3600
    # Only children: their root may still come, so the job waits for it.
    assert post(api, request(SPANS["chat1"], SPANS["tool"]).SerializeToString()).status_code == 200
    assert jobs.run_settle_traces()["events"] == 0
    settings.OTLP_ORPHAN_SECONDS = 0  # ... until the orphan timeout: then they are written anyway
    assert jobs.run_settle_traces()["events"] == 4
    assert {s.name for s in jobs.schedule_jobs()} >= {jobs.SETTLE_TRACES_SCHEDULE_NAME}


def _otlp_json(message: ExportTraceServiceRequest) -> dict:
    """The OTLP/JSON form of a request: ids in hex, enums as integers, camelCase keys."""
    from google.protobuf import json_format

    document = json_format.MessageToDict(message, use_integers_for_enums=True)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for item in scope["spans"]:
                for name in ("traceId", "spanId", "parentSpanId"):
                    if name in item:
                        import base64

                        item[name] = base64.b64decode(item[name]).hex().upper()  # hex is case-insensitive
    return document


def test_otlp_json_with_gzip_is_read_and_answered_in_json(api, project):
    conversation = span("c000000000000001", "", "invoke_agent helper", 0, 500, gen_ai__operation__name="invoke_agent",
                        gen_ai__conversation__id="conv-json", error="agent gave up")  # fmt: skip
    tool = span("c000000000000002", "c000000000000001", "execute_tool t", 100, 200,
                gen_ai__operation__name="execute_tool", gen_ai__tool__name="t")  # fmt: skip
    body = gzip.compress(orjson.dumps(_otlp_json(request(conversation, tool))))
    response = post(api, body, content_type="application/json", content_encoding="gzip")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == {}
    settle_now()
    session = Session.objects.get(source_session_id="conv-json")
    assert session.status == "failed" and session.event_count == 4
    steps = replay(api, session.pk)
    assert steps[-1]["event"]["kind"] == "error" and steps[-1]["event"]["payload"]["error"] == "agent gave up"
    assert steps[0]["event"]["payload"]["span"]["traceId"] == TRACE


def test_a_span_without_a_start_time_or_past_a_64_bit_one_is_rejected_by_a_partial_success(api, project):
    # A start at 2^63 ns or later (past the year 2262) overflowed the staged span's column: the
    # whole request answered 400 and its other spans were lost (exporters do not retry a 400).
    timeless = Span(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex("d000000000000001"), name="x")
    far = Span(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex("d000000000000002"), name="y",
               start_time_unix_nano=2**63, end_time_unix_nano=2**64 - 1)  # fmt: skip
    response = post(api, request(timeless, far, SPANS["chat1"]).SerializeToString())
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert response.status_code == 200 and answer.partial_success.rejected_spans == 2
    assert "without a start time" in answer.partial_success.error_message
    assert list(OtlpSpan.objects.values_list("span_id", flat=True)) == ["b000000000000001"]


def _status(response) -> status_pb2.Status:
    return status_pb2.Status.FromString(response.content)


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe not protobuf at all",
        # A well-formed protobuf of another OTLP message: it parses as a trace request, but its
        # "spans" have no 16-byte trace ids.
        ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics(scope_metrics=[
            ScopeMetrics(metrics=[Metric(name="cpu", description="load")])])]).SerializeToString(),
    ],
)  # fmt: skip
def test_a_protobuf_body_that_is_not_otlp_traces_is_a_400_status(api, project, body):
    response = post(api, body)
    assert response.status_code == 400 and response["Content-Type"] == PROTOBUF
    status = _status(response)
    assert status.code == 3 and ("ExportTraceServiceRequest" in status.message or "trace_id" in status.message)
    assert not Session.objects.exists()


def test_a_json_body_that_is_not_otlp_is_a_400_naming_the_field(api, project):
    bad = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "not-hex", "spanId": "00"}]}]}]}
    response = post(api, orjson.dumps(bad), content_type="application/json")
    assert response.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId: not hex" in response.json()["message"]
    assert post(api, b"[1, 2]", content_type="application/json").status_code == 400
    assert post(api, gzip.compress(b"x")[:-5], content_encoding="gzip").status_code == 400
    # A member that is no object, at any level (the cut before parsing read them as objects: 500s).
    for body, said in (
        ({"resourceSpans": [7]}, "resourceSpans[0]: expected an object, got a number"),
        ({"resourceSpans": [None]}, "resourceSpans[0]: expected an object, got null"),
        (
            {"resourceSpans": [{"scopeSpans": ["zz"]}]},
            "resourceSpans[0].scopeSpans[0]: expected an object, got a string",
        ),
        ({"resourceSpans": [{"scopeSpans": [{"spans": [1]}]}]}, "resourceSpans[0].scopeSpans[0].spans[0]: expected"),
    ):
        response = post(api, orjson.dumps(body), content_type="application/json")
        assert response.status_code == 400, (body, response.status_code)
        assert said in response.json()["message"], response.json()
    assert not Session.objects.exists()


def test_without_a_key_401_another_content_type_415_a_read_only_key_403(project, db):
    body = request(SPANS["chat1"]).SerializeToString()
    anonymous = Client().post("/v1/traces", body, content_type=PROTOBUF)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Bearer"
    assert _status(anonymous).code == 16
    # Without a key, nothing else is said first (not even that the content type is wrong).
    assert Client().post("/v1/traces", b"{}", content_type="text/plain").status_code == 401
    wrong = Client().post("/v1/traces", body, content_type=PROTOBUF, headers={"authorization": "Bearer rpl_nope"})
    assert wrong.status_code == 401
    reader = key_of(member("agent-viewer", project, Role.VIEWER), project=project)
    denied = Client().post("/v1/traces", body, content_type=PROTOBUF, headers={"authorization": f"Bearer {reader}"})
    assert denied.status_code == 403
    maintainer = key_of(member("agent-maintainer", project, Role.MAINTAINER), project=project)
    plain = Client().post(
        "/v1/traces", b"{}", content_type="text/plain", headers={"authorization": f"Bearer {maintainer}"}
    )
    assert plain.status_code == 415
    assert Client().get("/v1/traces").status_code == 405
    assert not OtlpSpan.objects.exists()


def test_a_key_of_several_projects_names_one_in_a_header(db):
    user = member("two-projects", Project.objects.create(name="A", slug="a"), Role.MAINTAINER)
    member("two-projects", Project.objects.create(name="B", slug="b"), Role.MAINTAINER)
    client = Client(headers={"authorization": f"Bearer {key_of(user)}"})
    body = request(SPANS["chat1"]).SerializeToString()
    assert post(client, body).status_code == 400
    assert post(client, body, x_replay_project="b").status_code == 200
    assert Session.objects.get().project.slug == "b"


def _nested_agents(prefix: str, conversation: str, *names: str) -> list[Span]:
    """A conversation's agent (`top`, span id `prefix` + "01") running sub-agents each inside the
    one before (`names`, ids 02, 03 ...), and a chat span inside the innermost (the next id)."""
    spans = [span(f"{prefix}01", "", "invoke_agent top", 0, 900, gen_ai__operation__name="invoke_agent",
                  gen_ai__conversation__id=conversation)]  # fmt: skip
    for n, name in enumerate(names, start=2):
        spans.append(span(f"{prefix}{n:02d}", f"{prefix}{n - 1:02d}", f"invoke_agent {name}", 100 * (n - 1),
                          900 - 100 * (n - 1), gen_ai__operation__name="invoke_agent", gen_ai__agent__name=name))  # fmt: skip
    last = len(spans)
    spans.append(span(f"{prefix}{last + 1:02d}", f"{prefix}{last:02d}", "chat m", 300, 400,
                      gen_ai__operation__name="chat", gen_ai__request__model="m"))  # fmt: skip
    return spans


def test_hostile_trees_land_once_each_and_a_sub_agents_straggler_joins_its_session(api, project):
    spans = [
        # An agent running a sub-agent, which runs a sub-agent of its own.
        *_nested_agents("e0000000000000", "conv-tree", "sub", "subsub"),
        # Two spans naming each other as parent, and one whose parent never comes.
        span("e000000000000005", "e000000000000006", "chat a", 10, 20, gen_ai__operation__name="chat"),
        span("e000000000000006", "e000000000000005", "chat b", 30, 40, gen_ai__operation__name="chat"),
        span("e000000000000007", "e0000000000000ff", "execute_tool t", 50, 60, gen_ai__operation__name="execute_tool",
             gen_ai__tool__name="t"),
    ]  # fmt: skip
    assert post(api, request(*spans).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-tree")
    sub = Session.objects.get(parent=top)
    subsub = Session.objects.get(parent=sub)
    assert [e.kind for e in top.events.order_by("seq")] == [
        "status", "llm_call", "llm_response", "llm_call", "llm_response", "tool_call", "tool_response",
        "child_spawn", "child_result", "status",
    ]  # fmt: skip
    assert [e.kind for e in sub.events.order_by("seq")] == ["status", "child_spawn", "child_result", "status"]
    assert [e.kind for e in subsub.events.order_by("seq")] == ["status", "llm_call", "llm_response", "status"]
    # A straggler under the innermost sub-agent joins that sub-agent's session.
    late = span("e000000000000008", "e000000000000003", "chat m", 500, 600, gen_ai__operation__name="chat",
                gen_ai__request__model="m")  # fmt: skip
    assert post(api, request(late).SerializeToString()).status_code == 200
    settle_now()
    assert subsub.events.count() == 6 and top.events.count() == 10 and sub.events.count() == 4
    assert OtlpSpan.objects.count() == 8 and not OtlpSpan.objects.filter(record__isnull=False).exists()
    # Only a sub-agent's span, and one whose parent had not come, note the session inside them;
    # a straggler under an ordinary span inside the innermost sub-agent (its chat) finds that
    # session by walking up the trace.
    noted = dict(OtlpSpan.objects.filter(session__isnull=False).values_list("span_id", "session_id"))
    assert noted == {"e000000000000002": sub.pk, "e000000000000003": subsub.pk, "e000000000000007": top.pk}
    later = span("e000000000000009", "e000000000000004", "execute_tool t", 350, 360,
                 gen_ai__operation__name="execute_tool", gen_ai__tool__name="t")  # fmt: skip
    assert post(api, request(later).SerializeToString()).status_code == 200
    settle_now()
    assert subsub.events.count() == 8 and top.events.count() == 10 and sub.events.count() == 4


def test_a_sub_agent_past_the_sessions_quota_stays_in_its_parents_session_and_nothing_is_lost(api, project):
    project.max_sessions = 1  # the conversation's own session, and no room for its sub-agent's
    project.save(update_fields=["max_sessions"])
    spans = _nested_agents("e1000000000000", "conv-full", "sub")
    assert post(api, request(*spans).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-full")
    assert Session.objects.filter(project=project).count() == 1
    # The sub-agent is spawned and answered in its parent's session, naming no session of its
    # own, and its model call is there between the two.
    events = list(top.events.order_by("seq"))
    kinds = [e.kind for e in events]
    assert kinds == ["status", "child_spawn", "llm_call", "llm_response", "child_result", "status"]
    spawn = orjson.loads(events[1].payload)
    assert spawn["sessionId"] is None and spawn["child_id"] == "conv-full/e100000000000002"
    assert events[1].pair_seq == 4 and not any(k == "user_message" for k in kinds)
    assert top.metadata["otlp"]["sub_agents_inline"] == 1 and top.status == Session.Status.COMPLETED
    assert not OtlpSpan.objects.filter(record__isnull=False).exists()
    # A straggler under the sub-agent joins the parent's session too.
    late = span("e100000000000004", "e100000000000002", "chat m", 500, 600, gen_ai__operation__name="chat",
                gen_ai__request__model="m")  # fmt: skip
    assert post(api, request(late).SerializeToString()).status_code == 200
    settle_now()
    top.refresh_from_db()
    assert [e.kind for e in top.events.order_by("seq")].count("llm_call") == 2
    assert Session.objects.filter(project=project).count() == 1


def test_nul_characters_in_the_operation_and_conversation_are_stored_not_a_500(api, project):
    spans = [
        span("f000000000000001", "", "invoke_agent x", 0, 100, gen_ai__operation__name="invoke_agent",
             gen_ai__conversation__id="conv\x00nul"),
        span("f000000000000002", "f000000000000001", "x", 10, 20, gen_ai__operation__name="chat\x00x"),
    ]  # fmt: skip
    assert post(api, request(*spans).SerializeToString()).status_code == 200
    assert post(api, request(*spans).SerializeToString()).status_code == 200  # found again, not made twice
    settle_now()
    session = Session.objects.get(source_format="otlp")
    assert session.source_session_id == "conv\ufffdnul" and session.event_count == 3
    assert session.events.get(seq=1).source_type == "chat\ufffdx"


def _conversation_spans(n: int, prompt: str) -> list[Span]:
    """An agent run (root and one chat span) of its own trace and conversation `conv-{n}`."""
    trace = f"{n:032x}"
    root, chat = f"{n:08x}00000001", f"{n:08x}00000002"
    spans = [
        span(root, "", "invoke_agent helper", 0, 1000, gen_ai__operation__name="invoke_agent",
             gen_ai__agent__name="helper", gen_ai__conversation__id=f"conv-{n}"),
        span(chat, root, "chat m", 100, 200, gen_ai__operation__name="chat", gen_ai__request__model="m",
             gen_ai__conversation__id=f"conv-{n}", gen_ai__input__messages=orjson.dumps(
                 [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]).decode()),
    ]  # fmt: skip
    for one in spans:
        one.trace_id = bytes.fromhex(trace)
    return spans


def test_a_request_and_a_settling_pass_read_the_redaction_rules_once_and_redact_every_session(api, project):
    # Each writer call used to look the project's rules up again (about four queries for every
    # session a request or a settling pass made); now a request and each settling transaction
    # read them once, and every session they write is still redacted under them.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from sessions_app.models import RedactionRules

    RedactionRules.objects.create(project=project, detectors=["email"])
    table = RedactionRules._meta.db_table
    body = request(
        *(s for n in range(1, 5) for s in _conversation_spans(n, f"mail ada{n}@example.com"))
    ).SerializeToString()
    with CaptureQueriesContext(connection) as staged:
        assert post(api, body).status_code == 200
    assert sum(table in q["sql"] for q in staged.captured_queries) == 1
    assert Session.objects.filter(source_format="otlp").count() == 4
    with CaptureQueriesContext(connection) as settled:
        settle_now()
    assert sum(table in q["sql"] for q in settled.captured_queries) == 1
    for row in otlp_sessions(api).values():
        steps = replay(api, row["id"])
        assert len(steps) == 4
        text = orjson.dumps([s["event"] for s in steps]).decode()
        assert "@example.com" not in text and "[REDACTED:email]" in text


def test_an_export_past_the_projects_storage_quota_is_a_413_status_and_stages_nothing(api, project):
    project.max_stored_bytes = 100
    project.save(update_fields=["max_stored_bytes"])
    response = post(api, request(SPANS["agent"], SPANS["chat1"]).SerializeToString())
    assert response.status_code == 413 and response["Content-Type"] == PROTOBUF
    status = _status(response)
    assert status.code == 8 and "quota" in status.message
    assert not Session.objects.exists()


def test_spans_waiting_to_settle_and_the_events_they_settle_into_count_toward_the_storage_quota(api, project):
    from sessions_app.ingest.quotas import stored_bytes

    body = request(*(s for n in range(1, 4) for s in _conversation_spans(n, "x" * 2000))).SerializeToString()
    assert post(api, body).status_code == 200
    staged = stored_bytes(project)
    waiting = sum(len(r) for r in OtlpSpan.objects.filter(record__isnull=False).values_list("record", flat=True))
    assert staged >= waiting > 6000  # the three prompts, at least
    # Counted by their traces as staged (no record is read per export), and none once settled.
    assert sum(OtlpTrace.objects.filter(pending=True).values_list("staged_chars", flat=True)) == waiting
    settle_now()
    assert not OtlpSpan.objects.filter(record__isnull=False).exists()
    assert set(OtlpTrace.objects.values_list("staged_chars", flat=True)) == {0}
    assert stored_bytes(project) >= waiting  # now its sessions' records
    # A quota the staged and settled bytes filled refuses the next export.
    project.max_stored_bytes = stored_bytes(project) + len(body) // 2
    project.save(update_fields=["max_stored_bytes"])
    assert post(api, request(*_conversation_spans(9, "y" * 2000)).SerializeToString()).status_code == 200
    assert post(api, request(*_conversation_spans(10, "z" * 2000)).SerializeToString()).status_code == 413


def test_settling_sessions_reads_their_rows_traces_and_spans_once_for_the_transaction(api, project):
    # Its events are appended and the session finished in one writer call, with the row the
    # settling locked: it was selected and saved by the append and again by finish_session, and
    # its spans were marked written one statement each, its traces read and updated on their own
    # (hundreds of small sessions a minute add that up). Then the sessions' rows, their waiting
    # traces and their spans were read with one query each *for every session*; now one each for
    # the settling transaction (building an ORM query cost more than a small session's settling).
    # The sessions still end as finished, with their run's end and agent.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    table = Session._meta.db_table
    body = request(*(s for n in range(1, 4) for s in _conversation_spans(n, f"task {n}"))).SerializeToString()
    assert post(api, body).status_code == 200
    with CaptureQueriesContext(connection) as settled:
        settle_now()
    sqls = [q["sql"] for q in settled.captured_queries]
    # The sessions' rows and their spans are written at the transaction's end (writer.shared_writes),
    # one executemany each: Django logs one as "3 times: UPDATE ...".
    assert [s for s in sqls if f'UPDATE "{table}"' in s and s.startswith("3 times: ")] == [
        s for s in sqls if f'UPDATE "{table}"' in s
    ]
    assert sum(s.startswith(f'3 times: UPDATE "{table}"') for s in sqls) == 1
    assert sum(s.startswith("SELECT") and f'FROM "{table}"' in s for s in sqls) == 1
    span_updates = [s for s in sqls if f"UPDATE {OtlpSpan._meta.db_table}" in s]
    assert sum(int(s.split(" times: ")[0]) if " times: " in s else 1 for s in span_updates) == 3
    # Whether any trace is quiet, the due sessions, their waiting traces (one query each) and
    # those traces' spans (one); the traces marked settled in one statement for the pass.
    traces_table = f'"{OtlpTrace._meta.db_table}"'
    spans_table = f'"{OtlpSpan._meta.db_table}"'
    assert sum(s.startswith("SELECT") and f"FROM {traces_table}" in s for s in sqls) == 3
    assert sum(s.startswith("SELECT") and f"FROM {spans_table}" in s for s in sqls) == 1
    assert sum(s.startswith(f"UPDATE {traces_table}") for s in sqls) == 1
    for session in Session.objects.filter(source_format="otlp"):
        assert session.status == "completed" and session.event_count == 4 and session.agent_id == "helper"
        assert session.ended_at == session.started_at + timedelta(seconds=1)


def test_a_session_that_fails_to_settle_or_is_no_longer_due_waits_and_the_others_of_its_transaction_settle(
    api, project, monkeypatch, falls_back
):
    # The transaction's sessions and spans are read together, but each session is still written
    # in a savepoint of its own, and the due-ness is checked again under the project's lock.
    from sessions_app.formats import otlp
    from sessions_app.ingest import traces

    body = request(*(s for n in range(1, 4) for s in _conversation_spans(n, f"task {n}"))).SerializeToString()
    assert post(api, body).status_code == 200
    ids = {s.source_session_id: s.pk for s in Session.objects.filter(source_format="otlp")}
    # conv-2 fails while it is written; conv-3 received a span after the due query ran.
    real_timeline = otlp.timeline

    def timeline(placed, *, first_step=0):
        events = real_timeline(placed, first_step=first_step)
        if any("task 2" in orjson.dumps(p.record).decode() for p in placed):
            raise RuntimeError("cannot be written")
        return events

    real_waiting = traces._waiting_spans
    later = timezone.now() + timedelta(seconds=10)

    def waiting(session_ids, quiet_since, orphaned_since):
        OtlpTrace.objects.filter(session_id=ids["conv-3"]).update(last_received_at=later)
        return real_waiting(session_ids, quiet_since, orphaned_since)

    monkeypatch.setattr(otlp, "timeline", timeline)
    monkeypatch.setattr(traces, "_waiting_spans", waiting)
    result = settle_traces(quiet_seconds=1, orphan_seconds=1, now=later - timedelta(seconds=5))
    assert result.sessions == [ids["conv-1"]]
    done = Session.objects.get(pk=ids["conv-1"])
    assert done.status == "completed" and done.event_count == 4
    for key in ("conv-2", "conv-3"):
        waiting_session = Session.objects.get(pk=ids[key])
        assert waiting_session.status == "live" and waiting_session.event_count == 0
        assert OtlpTrace.objects.get(session_id=ids[key]).pending
        assert OtlpSpan.objects.filter(trace__session_id=ids[key], record__isnull=False).count() == 2
    assert not OtlpTrace.objects.get(session_id=ids["conv-1"]).pending
    monkeypatch.undo()
    settle_traces(quiet_seconds=1, orphan_seconds=1, now=later + timedelta(seconds=5))
    assert Session.objects.filter(source_format="otlp", event_count=4).count() == 3


def test_a_settling_with_no_quiet_trace_costs_one_query_and_settles_nothing(api, project):
    # Every export request settles what is due; during a burst shorter than the quiet period
    # nothing is, and the grouping of every waiting trace by session was read for nothing.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    body = request(*(s for n in range(1, 4) for s in _conversation_spans(n, f"task {n}"))).SerializeToString()
    assert post(api, body).status_code == 200
    with CaptureQueriesContext(connection) as checked:
        result = settle_traces(quiet_seconds=3600, orphan_seconds=3600, project=project)
    assert len(checked.captured_queries) == 1 and not result.sessions and result.events == 0
    assert OtlpTrace.objects.filter(pending=True).count() == 3
    assert settle_traces(quiet_seconds=0, orphan_seconds=0, now=timezone.now() + timedelta(seconds=1)).events == 12


def test_conversations_past_the_sessions_quota_are_a_partial_success_and_each_new_session_is_audited(api, project):
    from sessions_app.models import AuditEntry

    project.max_sessions = 2
    project.save(update_fields=["max_sessions"])
    body = request(*(s for n in range(1, 5) for s in _conversation_spans(n, "hello"))).SerializeToString()
    response = post(api, body)
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert response.status_code == 200
    assert answer.partial_success.rejected_spans == 4  # two conversations of two spans each
    assert "quota of sessions" in answer.partial_success.error_message
    kept = set(Session.objects.filter(source_format="otlp").values_list("source_session_id", flat=True))
    assert len(kept) == 2 and OtlpSpan.objects.count() == 4
    created = AuditEntry.objects.filter(project=project, action="session.create_live")
    details = [e.detail if isinstance(e.detail, dict) else orjson.loads(e.detail) for e in created]
    assert sorted(d["source_session_id"] for d in details) == sorted(kept)
    assert {d["via"] for d in details} == {"POST /v1/traces"}
    assert all(e.key_prefix for e in created)  # by the API key
    # The same request again: the kept conversations' spans are stored already, the others are
    # refused again; no session more is made or audited.
    assert ExportTraceServiceResponse.FromString(post(api, body).content).partial_success.rejected_spans == 4
    settle_now()
    assert Session.objects.filter(source_format="otlp").count() == 2
    assert all(s.event_count == 4 for s in Session.objects.filter(source_format="otlp"))
    assert created.count() == 2


def test_a_settling_pauses_the_cyclic_collector_and_resumes_it_even_when_a_session_fails(
    api, project, monkeypatch, falls_back
):
    import gc

    from sessions_app.ingest import traces

    body = request(*_conversation_spans(1, "hi"), *_conversation_spans(2, "ho")).SerializeToString()
    assert post(api, body).status_code == 200
    seen: list[bool] = []
    failing: list[int] = []
    write = traces.append_and_finish

    def append_and_finish(**kwargs):
        seen.append(gc.isenabled())
        failing[:] = failing or [kwargs["session"].pk]
        if kwargs["session"].pk == failing[0]:
            raise RuntimeError("a session that cannot be written")
        return write(**kwargs)

    monkeypatch.setattr(traces, "append_and_finish", append_and_finish)
    assert gc.isenabled()
    settled = settle_traces(quiet_seconds=0, orphan_seconds=0, now=timezone.now() + timedelta(seconds=1))
    assert settled.events == 4 and len(settled.sessions) == 1  # the other session's spans wait
    assert failing[0] not in settled.sessions
    # Written together first (the failure undid both), then one at a time: three calls.
    assert seen == [False, False, False] and gc.isenabled()


def test_an_export_of_more_traces_than_a_statement_looks_up_is_stored_once_and_its_retry_not(api, project, monkeypatch):
    # The traces of a request are looked up, marked and found again on its retry a chunk at a
    # time (a statement of every id could pass the database's bound on its parameters): with
    # chunks of 3, ten traces take four of each, and a retry finds every span stored.
    from sessions_app.ingest import traces

    monkeypatch.setattr(traces, "_IDS_A_STATEMENT", 3)
    conversation = KeyValue(key="gen_ai.conversation.id", value=AnyValue(string_value="conv-many"))
    spans = [
        Span(trace_id=(n + 1).to_bytes(16, "big"), span_id=(n + 1).to_bytes(8, "big"), name="invoke_agent many",
             start_time_unix_nano=T0 + n, end_time_unix_nano=T0 + n + 1, attributes=[conversation])
        for n in range(10)
    ]  # fmt: skip
    body = request(*spans).SerializeToString()
    response = post(api, body)
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    # The retry, staged directly to see what it stores: nothing, every chunk's spans found.
    again = traces.stage_spans(project=project, records=otlp.span_records(ExportTraceServiceRequest.FromString(body)))
    assert (again.received, again.stored, again.rejected) == (10, 0, 0)
    assert OtlpTrace.objects.count() == 10 and OtlpSpan.objects.count() == 10
    assert OtlpTrace.objects.filter(root_seen=True, pending=True).count() == 10
    assert Session.objects.filter(source_format="otlp").count() == 1
    # One more span of a known trace is new, the others are not stored again.
    extra = Span(trace_id=(1).to_bytes(16, "big"), span_id=(99).to_bytes(8, "big"), parent_span_id=(1).to_bytes(8, "big"),
                 name="chat m", start_time_unix_nano=T0 + 5, end_time_unix_nano=T0 + 6)  # fmt: skip
    assert post(api, request(*spans[:5], extra).SerializeToString()).status_code == 200
    assert OtlpSpan.objects.count() == 11


def _turn(trace_no: int, conversation: str) -> list[Span]:
    """One agent run (turn) of a conversation: its root and a chat span, in trace `trace_no`."""
    trace = f"{trace_no:032x}"
    root, chat = f"{trace_no:08x}00000001", f"{trace_no:08x}00000002"
    spans = [
        span(root, "", "invoke_agent helper", trace_no * 1000, trace_no * 1000 + 900,
             gen_ai__operation__name="invoke_agent", gen_ai__conversation__id=conversation),
        span(chat, root, "chat m", trace_no * 1000 + 100, trace_no * 1000 + 200, gen_ai__operation__name="chat",
             gen_ai__request__model="m", gen_ai__conversation__id=conversation),
    ]  # fmt: skip
    for one in spans:
        one.trace_id = bytes.fromhex(trace)
    return spans


@pytest.mark.parametrize("redacted", [False, True])
def test_a_conversation_keeps_one_session_over_requests_whatever_its_id_becomes_when_stored(api, project, redacted):
    # A conversation's later turns were looked up by the session's stored source id, which is
    # the conversation id as redacted and cut to 200 characters: an id a rule redacts (a mail
    # address in it) or a longer one found no session and made a new one every request. Two
    # conversations whose ids redact alike must not share one either.
    from sessions_app.models import RedactionRules

    if redacted:
        RedactionRules.objects.create(project=project, detectors=["email"])
    ada, bob = "support/ada@example.com", "support/bob@example.com"
    # Alike in the 200 characters a session's source id keeps: two conversations all the same.
    long, longer = "x" * 150 + "/" + "y" * 150, "x" * 150 + "/" + "y" * 149 + "z"
    for turn, conversation in enumerate([ada, bob, long, ada, long, bob, ada, longer], start=1):
        assert post(api, request(*_turn(turn, conversation)).SerializeToString()).status_code == 200
    settle_now()
    sessions = Session.objects.filter(project=project).order_by("pk")
    assert [s.event_count for s in sessions] == [12, 8, 8, 4]
    assert [OtlpTrace.objects.filter(session=s).count() for s in sessions] == [3, 2, 2, 1]
    shown = [s.source_session_id for s in sessions]
    if redacted:
        assert shown[:2] == ["support/[REDACTED:email]"] * 2
        assert not any("@example.com" in e.payload for e in sessions[0].events.all())
    else:
        assert shown[:2] == [ada, bob]
    assert shown[2:] == [long[:200], longer[:200]]


def test_two_sub_agents_whose_conversation_ids_redact_alike_keep_a_session_each(api, project):
    # A sub-agent naming a conversation of its own gets that conversation's session; the staged
    # span is redacted, so two ids a rule makes read alike named one child session for both.
    from sessions_app.models import RedactionRules

    RedactionRules.objects.create(project=project, detectors=["email"])
    spans = [span("d000000000000001", "", "invoke_agent top", 0, 900, gen_ai__operation__name="invoke_agent",
                  gen_ai__conversation__id="conv-top")]  # fmt: skip
    for n, who in ((2, "ada"), (3, "bob")):
        spans.append(span(f"d00000000000000{n}", "d000000000000001", f"invoke_agent {who}", 100 * n, 100 * n + 50,
                          gen_ai__operation__name="invoke_agent", gen_ai__agent__name=who,
                          gen_ai__conversation__id=f"sub/{who}@example.com"))  # fmt: skip
    assert post(api, request(*spans).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-top")
    children = list(Session.objects.filter(parent=top).order_by("pk"))
    assert [c.agent_id for c in children] == ["ada", "bob"]
    assert [c.source_session_id for c in children] == ["conv-top/d000000000000002", "conv-top/d000000000000003"]
    spawned = [orjson.loads(e.payload)["sessionId"] for e in top.events.filter(kind="child_spawn").order_by("seq")]
    assert spawned == [c.pk for c in children]


def test_a_trace_staged_under_its_own_id_moves_to_its_conversation_when_its_root_names_it(api, project):
    from sessions_app.models import OtlpConversation

    first = _turn(1, "conv-moving")
    del first[1].attributes[:]  # the chat span names no conversation and arrives first
    first[1].attributes.extend(attrs(gen_ai__operation__name="chat", gen_ai__request__model="m"))
    assert post(api, request(first[1]).SerializeToString()).status_code == 200
    staged = Session.objects.get(project=project)
    assert staged.source_session_id == f"{1:032x}" and OtlpConversation.objects.filter(session=staged).exists()
    # Its root names the conversation: the trace moves there and the empty session goes, with
    # what found it; the conversation's next turn finds the same session.
    assert post(api, request(first[0]).SerializeToString()).status_code == 200
    assert not Session.objects.filter(pk=staged.pk).exists()
    assert not OtlpConversation.objects.filter(session_id=staged.pk).exists()
    assert post(api, request(*_turn(2, "conv-moving")).SerializeToString()).status_code == 200
    settle_now()
    session = Session.objects.get(project=project)
    assert session.source_session_id == "conv-moving" and session.event_count == 8
    assert OtlpConversation.objects.filter(project=project).count() == 1


def test_sub_agents_past_the_nesting_or_count_bounds_stay_inline_and_nothing_is_lost(api, project):
    # A hostile trace of 10,000 agents each inside the last made 10,000 nested child sessions in
    # one transaction (the database held for minutes). Past 8 levels of sub-agents, and past 100
    # child sessions in one settling, a sub-agent is spawned and answered in its parent's session.
    from sessions_app.ingest.traces import MAX_CHILD_SESSIONS_A_SETTLING, MAX_SUB_AGENT_NESTING

    deep = _nested_agents("e2000000000000", "conv-deep", *(f"a{n}" for n in range(MAX_SUB_AGENT_NESTING + 3)))
    assert post(api, request(*deep).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-deep")
    chain, session = [], top
    while (child := Session.objects.filter(parent=session).first()) is not None:
        chain.append(child)
        session = child
    assert len(chain) == MAX_SUB_AGENT_NESTING
    assert [c.metadata["otlp"]["nesting"] for c in chain] == list(range(1, MAX_SUB_AGENT_NESTING + 1))
    deepest = chain[-1]
    kinds = [e.kind for e in deepest.events.order_by("seq")]
    assert kinds.count("child_spawn") == 3 and kinds.count("llm_call") == 1
    assert deepest.metadata["otlp"]["sub_agents_inline"] == 3
    # Wide: siblings under one agent.
    wide = [span("e300000000000001", "", "invoke_agent top", 0, 9000, gen_ai__operation__name="invoke_agent",
                 gen_ai__conversation__id="conv-wide")]  # fmt: skip
    for n in range(MAX_CHILD_SESSIONS_A_SETTLING + 5):
        wide.append(span(f"e3000000000{n + 2:05x}", "e300000000000001", f"invoke_agent s{n}", n + 1, n + 2,
                         gen_ai__operation__name="invoke_agent", gen_ai__agent__name=f"s{n}"))  # fmt: skip
    for one in wide:
        one.trace_id = bytes.fromhex("e3" * 16)
    assert post(api, request(*wide).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-wide")
    assert Session.objects.filter(parent=top).count() == MAX_CHILD_SESSIONS_A_SETTLING
    assert top.events.filter(kind="child_spawn").count() == MAX_CHILD_SESSIONS_A_SETTLING + 5
    assert top.metadata["otlp"]["sub_agents_inline"] == 5
    assert not OtlpSpan.objects.filter(record__isnull=False).exists()


def test_a_new_trace_of_spans_that_are_no_genai_operation_makes_no_session(api, project):
    # A collector forwarding every trace made an empty, completed session for each HTTP request.
    health = Span(trace_id=bytes.fromhex("c1" * 16), span_id=bytes.fromhex("c100000000000001"), name="GET /health",
                  start_time_unix_nano=T0, end_time_unix_nano=T0 + 1000, attributes=attrs(http__route="/health"))  # fmt: skip
    response = post(api, request(health).SerializeToString())
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    settle_now()
    assert not Session.objects.exists() and not OtlpTrace.objects.exists()
    # Once a GenAI span made its trace known, a non-GenAI span of it is kept: it shapes the tree
    # (here: the agent's tool call runs inside an HTTP span inside the agent).
    http = span("b000000000000009", AGENT, "POST /tools", 250, 450, http__route="/tools")
    tool = span("b000000000000002", "b000000000000009", "execute_tool t", 300, 400,
                gen_ai__operation__name="execute_tool", gen_ai__tool__name="t")  # fmt: skip
    assert post(api, request(tool, SPANS["agent"]).SerializeToString()).status_code == 200
    assert post(api, request(http).SerializeToString()).status_code == 200
    assert OtlpSpan.objects.filter(span_id="b000000000000009").exists()
    settle_now()
    session = Session.objects.get(project=project)
    assert [e.kind for e in session.events.order_by("seq")] == ["status", "tool_call", "tool_response", "status"]


@pytest.mark.parametrize("content_type", [PROTOBUF, "application/json"])
def test_a_project_header_naming_no_project_the_key_may_use_is_a_404_status_in_the_requests_encoding(
    api, project, content_type
):
    # It answered Django's HTML 404 page, which no exporter reads.
    member("agent-maintainer", Project.objects.create(name="Other", slug="other"), Role.MAINTAINER)
    Project.objects.create(name="Strangers", slug="strangers")
    body = request(SPANS["chat1"])
    body = body.SerializeToString() if content_type == PROTOBUF else orjson.dumps(_otlp_json(body))
    # The key is limited to "agents": "other" (its user's too), "strangers" and an unknown slug are not its.
    for slug in ("other", "strangers", "no-such-project"):
        response = post(api, body, content_type=content_type, x_replay_project=slug)
        assert response.status_code == 404 and response["Content-Type"] == content_type
        status = _status(response) if content_type == PROTOBUF else response.json()
        message = status.message if content_type == PROTOBUF else status["message"]
        code = status.code if content_type == PROTOBUF else status["code"]
        assert code == 5 and message == f"X-Replay-Project: project {slug!r} not found"
    assert not OtlpSpan.objects.exists()
    assert post(api, body, content_type=content_type, x_replay_project="agents").status_code == 200


def test_shared_writes_stream_several_sessions_rows_and_let_any_other_statement_see_them(project):
    # writer.shared_writes: the rows of several appends go to one stream (one COPY on
    # PostgreSQL, which nothing else may interrupt) and the sessions' rows are saved at its end.
    # A statement run meanwhile first ends the COPY: it sees every row sent so far, and the
    # next rows open another. Without that, PostgreSQL refuses the statement mid-COPY.
    from django.db import transaction

    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import append_and_finish, create_session, shared_writes
    from sessions_app.models import Event

    from .conftest import synthetic_events

    made = [create_session(project=project, source_format="canonical", meta=SessionMeta()) for _ in range(3)]
    with transaction.atomic():
        locked = Session.objects.select_for_update().in_bulk([s.pk for s in made])
        with shared_writes() as shared:
            append_and_finish(
                session=locked[made[0].pk], events=synthetic_events(7), locked_by_caller=True, shared=shared
            )
            assert Event.objects.filter(session=made[0]).count() == 7  # a statement mid-stream
            append_and_finish(
                session=locked[made[1].pk], events=synthetic_events(5), locked_by_caller=True, shared=shared
            )
            append_and_finish(
                session=locked[made[2].pk], events=synthetic_events(3), locked_by_caller=True, shared=shared
            )
            # The sessions' rows wait for the end of the block.
            assert Session.objects.get(pk=made[1].pk).event_count == 0
    for session, count in zip(made, (7, 5, 3), strict=True):
        session.refresh_from_db()
        assert session.event_count == count and session.status == "completed"
        assert list(Event.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)) == list(
            range(count)
        )
        assert session.head_hash == Event.objects.get(session=session, seq=count - 1).hash  # sealed


def test_shared_writes_that_fail_abandon_their_stream_and_leave_no_row(project):
    from django.db import transaction

    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import append_and_finish, create_session, shared_writes
    from sessions_app.models import Event

    from .conftest import synthetic_events

    session = create_session(project=project, source_format="canonical", meta=SessionMeta())
    with pytest.raises(RuntimeError, match="after the rows"):
        with transaction.atomic():
            locked = Session.objects.select_for_update().get(pk=session.pk)
            with shared_writes() as shared:
                append_and_finish(session=locked, events=synthetic_events(4), locked_by_caller=True, shared=shared)
                raise RuntimeError("after the rows")
    assert not Event.objects.filter(session=session).exists()
    session.refresh_from_db()
    assert session.event_count == 0 and session.status == "live"
    # The connection is usable again: the same session settles afterwards.
    append_and_finish(session=session, events=synthetic_events(2))
    assert Event.objects.filter(session=session).count() == 2


def test_an_export_request_stages_with_the_cyclic_collector_paused_and_resumes_it(api, project, monkeypatch):
    import gc

    from sessions_app.ingest import traces

    seen: list[bool] = []
    stage = traces.stage_spans

    def stage_spans(**kwargs):
        seen.append(gc.isenabled())
        return stage(**kwargs)

    monkeypatch.setattr(traces, "stage_spans", stage_spans)
    assert gc.isenabled()
    assert post(api, request(*_conversation_spans(1, "hi")).SerializeToString()).status_code == 200
    assert seen == [False] and gc.isenabled()
    assert OtlpSpan.objects.count() == 2


def test_a_database_error_in_the_stream_undoes_the_transaction_and_its_sessions_settle_one_at_a_time(
    api, project, caplog, falls_back
):
    # conv-2's first event collides with a row already at its seq 0 (the (session, seq)
    # constraint), which PostgreSQL reports when the shared COPY ends, SQLite at its insert.
    # The transaction is undone and settled again one session at a time: conv-1 and conv-3
    # settle, conv-2 waits. Its next settling goes one at a time at once, without trying the
    # transaction together again (no second "together failed").
    from sessions_app.canonical import SessionMeta
    from sessions_app.ingest.writer import append_events, create_session
    from sessions_app.models import Event

    from .conftest import synthetic_events

    body = request(*(s for n in range(1, 4) for s in _conversation_spans(n, f"task {n}"))).SerializeToString()
    assert post(api, body).status_code == 200
    ids = {s.source_session_id: s.pk for s in Session.objects.filter(source_format="otlp")}
    scratch = create_session(project=project, source_format="canonical", meta=SessionMeta())
    append_events(session=scratch, events=synthetic_events(1))
    Event.objects.filter(session=scratch).update(session_id=ids["conv-2"])
    settle_now()
    assert sorted(Session.objects.filter(event_count=4).values_list("pk", flat=True)) == sorted(
        [ids["conv-1"], ids["conv-3"]]
    )
    blocked = Session.objects.get(pk=ids["conv-2"])
    assert blocked.status == "live" and blocked.event_count == 0
    assert OtlpSpan.objects.filter(trace__session_id=ids["conv-2"], record__isnull=False).count() == 2
    together = [r for r in caplog.records if "together failed" in r.getMessage()]
    assert len(together) == 1 and together[0].levelname == "WARNING"
    assert any(f"session {ids['conv-2']} failed" in r.getMessage() for r in caplog.records)
    settle_now()
    assert len([r for r in caplog.records if "together failed" in r.getMessage()]) == 1
    # Once the colliding row is gone the session settles.
    Event.objects.filter(session_id=ids["conv-2"]).delete()
    settle_now()
    assert Session.objects.get(pk=ids["conv-2"]).event_count == 4


def test_a_straggler_under_a_span_written_before_its_parent_came_lands_beside_that_span(api, project):
    # X was written while its parent T had not come: in the top session. T then comes, inside a
    # sub-agent S (S's own session), and with it Y, a child of X: Y lands beside X in the top
    # session, as X's context was when it was written, not in S's session, where T is.
    top_agent = span("f000000000000001", "", "invoke_agent top", 0, 1000, gen_ai__operation__name="invoke_agent",
                     gen_ai__conversation__id="conv-late-parent")  # fmt: skip
    sub = span("f000000000000002", "f000000000000001", "invoke_agent sub", 100, 900,
               gen_ai__operation__name="invoke_agent", gen_ai__agent__name="sub")  # fmt: skip
    x = span("f000000000000004", "f000000000000003", "chat x", 300, 400, gen_ai__operation__name="chat",
             gen_ai__request__model="m")  # fmt: skip
    assert post(api, request(top_agent, sub, x).SerializeToString()).status_code == 200
    settle_now()
    top = Session.objects.get(source_session_id="conv-late-parent")
    child = Session.objects.get(parent=top)
    assert top.events.filter(source_type="chat").count() == 2  # X's call and response
    t = span("f000000000000003", "f000000000000002", "chat t", 200, 500, gen_ai__operation__name="chat",
             gen_ai__request__model="m")  # fmt: skip
    y = span("f000000000000005", "f000000000000004", "execute_tool y", 350, 360,
             gen_ai__operation__name="execute_tool", gen_ai__tool__name="y")  # fmt: skip
    assert post(api, request(t, y).SerializeToString()).status_code == 200
    settle_now()
    assert top.events.filter(source_type="execute_tool").count() == 2  # Y, beside X
    assert child.events.filter(source_type="chat").count() == 2  # T, inside the sub-agent
    assert not child.events.filter(source_type="execute_tool").exists()


def _bloated_span() -> Span:
    """A chat span past every limit: attributes, events and their attributes, and values inside
    one attribute (an array of arrays), each a few more than kept."""
    bloated = span("e000000000000001", AGENT, "chat m", 100, 200, gen_ai__operation__name="chat")
    extra = otlp.ITEMS_LIMIT + 5 - len(bloated.attributes)
    bloated.attributes.extend(KeyValue(key=f"x.{n}", value=AnyValue(int_value=n)) for n in range(extra))
    nested = AnyValue()
    for _ in range(3):  # 3 arrays of VALUES_LIMIT / 2 values: 3 + 1.5 * VALUES_LIMIT values in all
        inner = nested.array_value.values.add()
        inner.array_value.values.extend(AnyValue(int_value=1) for _ in range(otlp.VALUES_LIMIT // 2))
    bloated.attributes.insert(0, KeyValue(key="nested", value=nested))
    for n in range(otlp.ITEMS_LIMIT + 3):
        bloated.events.add(name=f"e{n}", time_unix_nano=T0 + 150_000_000)
    bloated.events[0].attributes.extend(KeyValue(key=f"a{n}", value=AnyValue(int_value=n))
                                        for n in range(otlp.ITEMS_LIMIT + 2))  # fmt: skip
    return bloated


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_span_past_the_limits_keeps_what_an_sdk_would_and_its_excess_costs_nothing(api, project, encoding):
    # The limits OpenTelemetry's SDKs set on what they send, set on what we read: a request of a
    # few megabytes could hold millions of empty attributes, each converted (20 s a request).
    message = request(SPANS["agent"], _bloated_span())
    if encoding == "json":
        response = post(api, orjson.dumps(_otlp_json(message)), content_type="application/json")
    else:
        response = post(api, message.SerializeToString())
    assert response.status_code == 200, response.content
    record = orjson.loads(OtlpSpan.objects.get(span_id="e000000000000001").record)
    assert len(record["attributes"]) == otlp.ITEMS_LIMIT
    assert record["attributes"]["gen_ai.operation.name"] == "chat"
    nested = record["attributes"]["nested"]
    assert len(nested) == 3 and sum(len(inner) for inner in nested) == otlp.VALUES_LIMIT - 3
    assert len(record["events"]) == otlp.ITEMS_LIMIT and len(record["events"][0]["attributes"]) == otlp.ITEMS_LIMIT


def test_an_export_past_the_otlp_size_limit_is_a_413_before_or_after_gzip(api, project, settings):
    body = request(SPANS["agent"], SPANS["chat1"]).SerializeToString()
    settings.OTLP_MAX_BYTES = len(body) - 1
    for sent, headers in ((body, {}), (gzip.compress(body), {"content_encoding": "gzip"})):
        response = post(api, sent, **headers)
        assert response.status_code == 413 and response["Content-Type"] == PROTOBUF
        status = _status(response)
        assert status.code == 8 and "REPLAY_OTLP_MAX_MB" in status.message and "smaller batches" in status.message
    assert not OtlpSpan.objects.exists()
    settings.OTLP_MAX_BYTES = len(body)
    assert post(api, gzip.compress(body), content_encoding="gzip").status_code == 200


def test_the_json_cut_keeps_what_span_records_keeps_before_protobuf_parses_it():
    # ParseDict is pure Python: the cut must happen on the document, before it (a review found
    # scope attributes left whole, 7 s of CPU for 8 MiB of them).
    document = _otlp_json(request(SPANS["agent"], _bloated_span()))
    document["resourceSpans"][0]["scopeSpans"][0]["scope"] = {
        "name": "s", "attributes": [{"key": f"s{n}", "value": {"intValue": n}} for n in range(otlp.ITEMS_LIMIT + 4)]}  # fmt: skip
    otlp._within_limits(document)
    scope = document["resourceSpans"][0]["scopeSpans"][0]
    assert len(scope["scope"]["attributes"]) == otlp.ITEMS_LIMIT
    bloated = scope["spans"][1]
    assert len(bloated["attributes"]) == otlp.ITEMS_LIMIT and len(bloated["events"]) == otlp.ITEMS_LIMIT
    assert len(bloated["events"][0]["attributes"]) == otlp.ITEMS_LIMIT
    nested = next(pair["value"] for pair in bloated["attributes"] if pair["key"] == "nested")["arrayValue"]["values"]
    assert sum(len(inner["arrayValue"]["values"]) for inner in nested) == otlp.VALUES_LIMIT - 3


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_request_of_more_spans_than_a_batch_holds_is_a_413_before_anything_walks_them(api, project, encoding):
    many = [Span(trace_id=bytes.fromhex(TRACE), span_id=(n + 1).to_bytes(8, "big"), name="x",
                 start_time_unix_nano=T0) for n in range(otlp.SPANS_LIMIT + 1)]  # fmt: skip
    if encoding == "json":
        # Empty scopes count as well: millions of them cost seconds to walk (review).
        document = {"resourceSpans": [{"scopeSpans": [{}] * (otlp.SPANS_LIMIT + 1)}]}
        response = post(api, orjson.dumps(document), content_type="application/json")
    else:
        response = post(api, request(*many).SerializeToString())
    assert response.status_code == 413, response.content
    assert "export smaller batches" in (response.json()["message"] if encoding == "json" else _status(response).message)
    assert not OtlpSpan.objects.exists()
    assert post(api, request(*many[: otlp.SPANS_LIMIT // 10]).SerializeToString()).status_code == 200


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_request_of_more_attributes_events_and_links_than_batches_hold_is_a_413(api, project, encoding):
    # Each span within its own limits, the request past ITEMS_PER_REQUEST in all: 4,000 spans of
    # 1,000 empty events cost 5 s and 1.3 GiB (security sweep).
    per_span = otlp.ITEMS_LIMIT // 2
    spans = []
    for n in range(otlp.ITEMS_PER_REQUEST // per_span + 1):
        one = Span(trace_id=bytes.fromhex(TRACE), span_id=(n + 1).to_bytes(8, "big"), name="x", start_time_unix_nano=T0)
        one.events.extend(Span.Event(name="e") for _ in range(per_span))
        spans.append(one)
    message = request(*spans)
    if encoding == "json":
        response = post(api, orjson.dumps(_otlp_json(message)), content_type="application/json")
        said = response.json()["message"]
    else:
        response = post(api, message.SerializeToString())
        said = _status(response).message
    assert response.status_code == 413 and "attributes, events and links" in said, response.content
    assert not OtlpSpan.objects.exists()
    assert post(api, request(*spans[:10]).SerializeToString()).status_code == 200
