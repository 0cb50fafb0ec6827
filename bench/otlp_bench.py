"""OpenTelemetry ingest: 100,000 GenAI spans posted to POST /v1/traces in batches of 512.

    .venv/bin/python bench/otlp_bench.py [--spans 100000] [--batch 512] [--trace-spans 20]
    .venv/bin/python .ci/with_postgres.py -- .venv/bin/python bench/otlp_bench.py

In-process: each export request goes through Django's WSGI handler (the whole middleware stack,
authentication, parsing, staging and the settling a request does), one after another, the way a
collector's exporter sends them; no HTTP server or socket. Migrates a fresh temporary SQLite
database (or uses the PostgreSQL of DATABASE_URL).

The spans are agent runs of `--trace-spans` spans each (an invoke_agent root, then chat and
execute_tool spans in turn with prompts, completions, tokens and tool call ids; every 7th tool
fails), `--conversation-traces` runs (turns) to a conversation, i.e. a session, in the order an
SDK exports them (each span as it ends, the root last), cut into batches of `--batch` without
regard to trace boundaries. Request bodies are encoded before the
clock starts. Prints:

- requests: spans/s over the export requests (which settle the traces that became quiet during
  the run, REPLAY_OTLP_SETTLE_SECONDS, 10 s by default);
- end to end: spans/s until every span is an event (the remaining traces settled at once, as the
  job would after the quiet period), the figure the target (>= 5,000 spans/s) is about;
- CPU time: the process's own (SQLite runs in it), spans per CPU second: what a busy shared
  machine's wall clock hides;
- peak memory: the process's peak RSS during the run over its RSS before it (the request bodies
  are encoded before).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROTOBUF = "application/x-protobuf"
T0 = 1_770_000_000_000_000_000  # ns


def agent_runs(total: int, per_trace: int, per_conversation: int):
    """Spans as an SDK exports them: within each trace, each span when it ends (the root last)."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    def attributes(**values) -> list:
        out = []
        for key, value in values.items():
            key = key.replace("__", ".")
            any_value = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
            out.append(KeyValue(key=key, value=any_value))
        return out

    text = "The quick brown fox jumps over the lazy dog. " * 4
    made = 0
    trace_no = 0
    while made < total:
        trace_no += 1
        trace_id = trace_no.to_bytes(16, "big")
        root_id = (trace_no << 20).to_bytes(8, "big")
        start = T0 + trace_no * 60_000_000_000
        children = min(per_trace, total - made) - 1
        clock = start
        for i in range(children):
            span_id = ((trace_no << 20) + i + 1).to_bytes(8, "big")
            if i % 2 == 0:
                attrs = attributes(
                    gen_ai__operation__name="chat", gen_ai__request__model="gpt-4o", gen_ai__provider__name="openai",
                    gen_ai__conversation__id=f"conv-{trace_no // per_conversation}",
                    gen_ai__usage__input_tokens=800 + i, gen_ai__usage__output_tokens=60,
                    gen_ai__input__messages=orjson.dumps([{"role": "user", "parts": [
                        {"type": "text", "content": f"step {i}: {text}"}]}]).decode(),
                    gen_ai__output__messages=orjson.dumps([{"role": "assistant", "finish_reason": "tool_calls",
                        "parts": [{"type": "tool_call", "id": f"call_{trace_no}_{i}", "name": "read_file",
                                   "arguments": {"path": f"/src/m{i}.py"}}]}]).decode(),
                )  # fmt: skip
                name, status = "chat gpt-4o", Status()
            else:
                attrs = attributes(
                    gen_ai__operation__name="execute_tool", gen_ai__tool__name="read_file",
                    gen_ai__tool__call__id=f"call_{trace_no}_{i - 1}",
                    gen_ai__tool__call__arguments=orjson.dumps({"path": f"/src/m{i - 1}.py"}).decode(),
                    gen_ai__tool__call__result=text,
                )  # fmt: skip
                failed = i % 7 == 0
                name = "execute_tool read_file"
                status = Status(code=Status.STATUS_CODE_ERROR, message="file not found") if failed else Status()
            yield Span(trace_id=trace_id, span_id=span_id, parent_span_id=root_id, name=name,
                       start_time_unix_nano=clock, end_time_unix_nano=clock + 400_000_000,
                       attributes=attrs, status=status)  # fmt: skip
            clock += 500_000_000
        yield Span(
            trace_id=trace_id, span_id=root_id, name="invoke_agent coder", start_time_unix_nano=start - 1000,
            end_time_unix_nano=clock,
            attributes=attributes(gen_ai__operation__name="invoke_agent", gen_ai__agent__name="coder",
                                  gen_ai__conversation__id=f"conv-{trace_no // per_conversation}"),
        )  # fmt: skip
        made += children + 1


def bodies(total: int, batch: int, per_trace: int, per_conversation: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    resource_ = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="bench-agent"))])

    def encode(spans: list) -> bytes:
        return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource_, scope_spans=[
            ScopeSpans(scope=InstrumentationScope(name="bench"), spans=spans)])]).SerializeToString()  # fmt: skip

    # Encoded a batch at a time: the span objects of the whole run would take more memory than
    # the run itself.
    out, pending = [], []
    for span in agent_runs(total, per_trace, per_conversation):
        pending.append(span)
        if len(pending) == batch:
            out.append(encode(pending))
            pending = []
    if pending:
        out.append(encode(pending))
    return out


def rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak since `reset_peak`) of this process, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM starts again from VmRSS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--trace-spans", type=int, default=20, help="spans per agent run (trace)")
    parser.add_argument("--conversation-traces", type=int, default=5, help="traces (turns) per conversation")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="replay-otlp-bench-")
    folder = Path(tmp.name)
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = f"sqlite:///{folder}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    os.environ["REPLAY_DATA_DIR"] = str(folder / "data")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command
    from django.db import connection

    from sessions_app.ingest.traces import settle_traces
    from sessions_app.models import ApiKey, Event, Membership, OtlpSpan, OtlpTrace, Project, Role, Session

    call_command("migrate", verbosity=0)
    stamp = datetime.now().strftime("%H%M%S")
    project = Project.objects.create(name=f"otlp bench {stamp}", slug=f"otlp-bench-{stamp}")
    owner = get_user_model().objects.create_user(username=f"otlp-bench-{stamp}")
    Membership.objects.create(project=project, user=owner, role=Role.MAINTAINER)
    api_key, key = ApiKey.create_key(name=f"otlp bench {stamp}", user=owner, project=project)

    encoded = bodies(args.spans, args.batch, args.trace_spans, args.conversation_traces)
    size = sum(len(b) for b in encoded) / args.spans
    print(f"database: {connection.vendor}; {args.spans:,} spans (~{size:.0f} B each as protobuf) in "
          f"{len(encoded)} requests of {args.batch}; {args.trace_spans} spans a trace, "
          f"{args.conversation_traces} traces a conversation (session); "
          f"settle after {settings.OTLP_SETTLE_SECONDS:g} s quiet", flush=True)  # fmt: skip

    handler = WSGIHandler()
    statuses: list[str] = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)

    def export(body: bytes) -> None:
        environ = {
            "REQUEST_METHOD": "POST", "PATH_INFO": "/v1/traces", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80",
            "HTTP_HOST": "127.0.0.1", "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(body),
            "CONTENT_TYPE": PROTOBUF, "CONTENT_LENGTH": str(len(body)), "HTTP_AUTHORIZATION": f"Bearer {key}",
        }  # fmt: skip
        response = handler(environ, start_response)
        b"".join(response)
        response.close()
        if not statuses[-1].startswith("200"):
            sys.exit(f"export failed: {statuses[-1]}")

    export(b"")  # an empty export: what a running server has done before (the URLConf imported)
    reset_peak()
    before = rss_mib("VmRSS")
    started, cpu_started = time.perf_counter(), time.process_time()
    for body in encoded:
        export(body)
    requests_s = time.perf_counter() - started
    requests_cpu = time.process_time() - cpu_started
    written_during = Event.objects.filter(session__project=project).count()
    settle_traces(quiet_seconds=0, orphan_seconds=0, project=project)
    total_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_started
    peak = rss_mib("VmHWM") - before

    events = Event.objects.filter(session__project=project).count()
    waiting = OtlpSpan.objects.filter(trace__project=project, record__isnull=False).count()
    sessions = Session.objects.filter(project=project).count()
    assert waiting == 0 and not OtlpTrace.objects.filter(project=project, pending=True).exists()
    print(f"requests: {requests_s:.2f} s, {args.spans / requests_s:,.0f} spans/s "
          f"({written_during:,} events written by the requests' own settling)")  # fmt: skip
    print(f"end to end (every span an event): {total_s:.2f} s, {args.spans / total_s:,.0f} spans/s "
          f"-> {events:,} events in {sessions:,} sessions (target >= 5,000 spans/s: "
          f"{'met' if args.spans / total_s >= 5000 else 'NOT met'})")  # fmt: skip
    print(f"CPU time of this process: {cpu_s:.2f} s, {args.spans / cpu_s:,.0f} spans per CPU second (the figure a "
          f"shared machine's load does not change; with SQLite all the work is in this process); the requests "
          f"{requests_cpu:.2f} s, the settling after them {cpu_s - requests_cpu:.2f} s "
          f"({total_s - requests_s:.2f} s wall)")  # fmt: skip
    print(f"peak memory: +{peak:,.0f} MiB RSS over the process before the first request (the encoded bodies, "
          f"{sum(len(b) for b in encoded) / 2**20:,.1f} MiB, were made before)")  # fmt: skip

    # The project stays: its audit log (the sessions the bench made) is append-only and keeps
    # naming it. In the bench's own temporary SQLite database nothing stays at all.
    Session.objects.filter(project=project).delete()
    api_key.delete()
    connection.close()


if __name__ == "__main__":
    main()
