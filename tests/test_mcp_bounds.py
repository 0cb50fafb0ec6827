"""MCP arguments and methods a client may get wrong: every integer argument of every tool is
bounded in its input schema, so a number past 64 bits is a validation message naming the
argument (it crashed inside the tool: OverflowError, "Error executing tool"); and /mcp, which is
stateless, answers a GET (a stream nothing could ever be sent on) with 405, not a stream held
open for ever. Found by a security review against a running server.
"""

from __future__ import annotations

import re

import anyio
import orjson
import pytest
from mcp import Client

from sessions_app import comments
from sessions_app.access import Actor
from sessions_app.canonical import Kind, SessionMeta, StateChange
from sessions_app.ingest.writer import append_events, create_session, finish_session
from sessions_app.mcp import text as mcp_text
from sessions_app.mcp.http import McpEndpoint
from sessions_app.mcp.server import build_server
from sessions_app.models import ApiKey, Project, Role, Session

from .builders_teams import key_of
from .conftest import synthetic_events
from .test_mcp import member

# Every integer argument of every tool (test_the_list_is_every_integer_argument keeps it whole),
# with the other arguments a call needs.
SESSION = {"sessionId": "bounds_run"}
INTEGER_ARGUMENTS = [
    ("replay_session", "fromStep", SESSION),
    ("replay_session", "toStep", SESSION),
    ("list_sessions", "limit", {}),
    ("find_errors", "afterEvent", SESSION),
    ("find_errors", "limit", SESSION),
    ("find_errors", "around", SESSION),
    ("step_state", "event", SESSION),
    ("step_state", "stepIndex", SESSION),
    ("search_events", "limit", {"text": "x"}),
    ("get_comments", "event", SESSION),
]


def _integer(schema: dict) -> bool:
    return schema.get("type") == "integer" or any(option.get("type") == "integer" for option in schema.get("anyOf", []))


def test_the_list_is_every_integer_argument():
    tools = anyio.run(build_server().list_tools)
    found = {(tool.name, name) for tool in tools for name, schema in tool.input_schema["properties"].items()
             if _integer(schema)}  # fmt: skip
    assert found == {(tool, name) for tool, name, _ in INTEGER_ARGUMENTS}
    # Bounded in the schema the client reads, too.
    for tool in tools:
        for name, schema in tool.input_schema["properties"].items():
            if _integer(schema):
                bounds = schema if "type" in schema else next(o for o in schema["anyOf"] if o["type"] == "integer")
                assert "minimum" in bounds and "maximum" in bounds, (tool.name, name)


@pytest.fixture
def viewer(transactional_db) -> Client:
    # Committed: the tools read in worker threads, on connections of their own.
    run = create_session(project=Project.get_default(), source_format="canonical",
                         meta=SessionMeta(source_session_id="bounds_run"))  # fmt: skip
    append_events(session=run, events=synthetic_events(5))
    key = ApiKey.authenticate(key_of(member("bounds-viewer", role=Role.VIEWER)))
    return Client(build_server(actor=Actor(user=key.user, key=key)))


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1])
@pytest.mark.parametrize(("tool", "argument", "others"), INTEGER_ARGUMENTS)
def test_an_integer_argument_past_64_bits_is_a_validation_message_naming_it(viewer, tool, argument, others, value):
    async def main() -> None:
        async with viewer:
            result = await viewer.call_tool(tool, {**others, argument: value})
            message = result.content[0].text
            assert result.is_error and argument in message, message
            # Not the bare "Error executing tool find_errors" of a crash inside the tool.
            assert "validation error" in message and ("less than or equal" in message or "greater than" in message)
            # The server answers on.
            assert not (await viewer.call_tool("list_sessions", {})).is_error

    anyio.run(main)


async def _exchange(endpoint: McpEndpoint, method: str, key: str, body: bytes = b"") -> tuple[dict, bytes]:
    """One request to /mcp as a client that stays connected: (the response's start, its body)."""
    sent: list[dict] = []
    asked = False

    async def receive() -> dict:
        nonlocal asked
        if asked:
            await anyio.sleep_forever()  # connected until the answer ends
        asked = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {key}".encode()),
               (b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]  # fmt: skip
    scope = {"type": "http", "method": method, "path": "/mcp", "raw_path": b"/mcp", "query_string": b"",
             "headers": headers, "scheme": "http", "server": ("127.0.0.1", 8000), "http_version": "1.1"}  # fmt: skip
    with anyio.fail_after(10):  # a stream held open fails here
        await endpoint(scope, receive, send)
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_get_or_delete_of_the_stateless_endpoint_is_a_405_naming_post_not_a_stream_held_open(transactional_db):
    key = key_of(member("stream-viewer", role=Role.VIEWER))

    async def main() -> None:
        endpoint = McpEndpoint()
        async with endpoint.running():
            for method in ("GET", "DELETE"):
                start, body = await _exchange(endpoint, method, key)
                assert start["status"] == 405, (method, start, body)
                assert dict(start["headers"])[b"allow"] == b"POST" and b"only POST" in body
            listing = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
            start, body = await _exchange(endpoint, "POST", key, listing)
            assert start["status"] == 200 and b"replay_session" in body, body
            start, _ = await _exchange(endpoint, "GET", "rpl_not-a-key")
            assert start["status"] == 401  # the key is still checked first

    anyio.run(main)


# --- answer sizes: every tool's answer fits text.MAX_ANSWER_CHARS, and a cut one says how to go on ---

BUDGET = mcp_text.MAX_ANSWER_CHARS
# Multi-byte text, so a cut inside a character's bytes would show (as mojibake or a failed decode).
WIDE = "é✓中🙂"


def _huge_session(source_id: str, count: int, chars: int) -> Session:
    """`count` error events, each with an error message and a text of `chars` characters."""
    run = create_session(project=Project.get_default(), source_format="canonical",
                         meta=SessionMeta(source_session_id=source_id, agent_id="a" * 200, task=WIDE * 5000))  # fmt: skip
    events = list(synthetic_events(count))
    for i, event in enumerate(events):
        event.kind, event.is_error, event.failed = Kind.ERROR, True, True
        event.payload = {"error": f"failure {i} " + WIDE * (chars // 4), "text": f"hay{i} " + WIDE * (chars // 4)}
    append_events(session=run, events=events)
    finish_session(session=run)
    return run


@pytest.fixture
def huge(transactional_db) -> tuple[Client, Session]:
    run = _huge_session("huge_run" + "x" * 150, 300, 4000)
    key = ApiKey.authenticate(key_of(member("huge-viewer", role=Role.VIEWER)))
    return Client(build_server(actor=Actor(user=key.user, key=key))), run


async def _text(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    assert not result.is_error, text
    assert len(text) <= BUDGET, (tool, len(text))
    text.encode("utf-8")  # whole characters only: a lone surrogate would not encode
    return text


def test_find_errors_fits_the_budget_and_its_note_continues_through_every_error(huge):
    client, run = huge
    seen: list[int] = []

    async def main() -> None:
        async with client:
            after = None
            for _ in range(60):
                arguments = {"sessionId": str(run.pk), "limit": 50, "around": 5}
                if after is not None:
                    arguments["afterEvent"] = after
                text = await _text(client, "find_errors", **arguments)
                seen.extend(int(n) for n in re.findall(r"Error at event #(\d+) ", text))
                found = re.search(r'find_errors with sessionId="\d+", afterEvent=(\d+)', text)
                if found is None:
                    return
                if after is None:
                    assert "Cut at 24,000 characters" in text  # cut by size, not by limit
                after = int(found.group(1))

    anyio.run(main)
    assert seen == list(range(1, 301))  # every error once, in order, none skipped by the cut


def test_replay_session_fits_the_budget_and_its_next_call_continues_without_a_gap(huge):
    client, run = huge
    seen: list[int] = []

    async def main() -> None:
        async with client:
            arguments = {"sessionId": str(run.pk)}
            for _ in range(60):
                text = await _text(client, "replay_session", **arguments)
                assert text.startswith("📼 Session Replay: ")
                seen.extend(int(n) for n in re.findall(r"^(\d+)\. \[", text, re.MULTILINE))
                found = re.search(r'Next: replay_session with sessionId="(\d+)", fromStep=(\d+), toStep=(\d+)', text)
                if found is not None:
                    assert "Cut at" in text
                    arguments = {"sessionId": found.group(1), "fromStep": int(found.group(2)),
                                 "toStep": int(found.group(3))}  # fmt: skip
                    continue
                # The range asked for is done; the session goes on.
                following = re.search(r"More steps follow: fromStep=(\d+) continues", text)
                if following is None:
                    return
                arguments = {"sessionId": str(run.pk), "fromStep": int(following.group(1))}

    anyio.run(main)
    assert seen == list(range(1, 301))


def test_step_state_cuts_a_huge_variable_and_names_where_it_is_whole(transactional_db):
    run = create_session(project=Project.get_default(), source_format="canonical",
                         meta=SessionMeta(source_session_id="state_run"))  # fmt: skip
    events = list(synthetic_events(5))
    variables = {"huge": "v" * 1_000_000, **{f"var{i}": WIDE * 3000 for i in range(99)}}
    events[0].state_change = StateChange(variables=variables, memory=[WIDE * 3000 for _ in range(50)])
    events[0].payload = {"text": "p" * 200_000, "items": list(range(5000)), "nested": {"a": {"b": [WIDE * 999]}}}
    append_events(session=run, events=events)
    key = ApiKey.authenticate(key_of(member("state-viewer", role=Role.VIEWER)))
    client = Client(build_server(actor=Actor(user=key.user, key=key)))

    async def main() -> str:
        async with client:
            return await _text(client, "step_state", sessionId="state_run", event=1)

    text = anyio.run(main)
    whole = f"GET /api/sessions/{run.pk}/context?seq=0"
    assert f"huge = {'v' * 300}… (999,700 more characters; whole: {whole})" in text
    assert f"all of them: {whole}" in text  # not all 100 variables fit their share
    assert "This event's payload:" in text and "shortened from" in text
    # The payload is still JSON that parses, shortened inside, not cut mid-structure.
    block = text.split("This event's payload:\n", 1)[1].split("\n(shortened from", 1)[0]
    assert orjson.loads(block)["text"].startswith("ppp")


def test_the_other_tools_fit_the_budget(huge):
    client, run = huge
    reviewer = member("huge-reviewer", role=Role.REVIEWER)
    for seq in range(40):
        thread = comments.create_comment(actor=Actor(user=reviewer), session=run, body=WIDE * 2400, seq=seq)
        comments.create_comment(actor=Actor(user=reviewer), session=run, body=WIDE * 2400, parent=thread.pk)
    for i in range(49):
        _huge_session(f"other_{i}_" + "y" * 180, 1, 10)

    async def main() -> None:
        async with client:
            text = await _text(client, "get_comments", sessionId=str(run.pk))
            assert f"GET /api/sessions/{run.pk}/comments" in text and "ask for one event's with `event`" in text
            text = await _text(client, "list_sessions", limit=50)
            cursor = re.search(r'cursor="([^"]+)"', text).group(1)
            shown = set(re.findall(r"^#(\d+) ", text, re.MULTILINE))
            rest = await _text(client, "list_sessions", limit=50, cursor=cursor)
            assert shown and not shown & set(re.findall(r"^#(\d+) ", rest, re.MULTILINE))
            # Followed cursor by cursor, the search gives every hit once: the huge run's 300
            # events and the 49 other sessions' one each.
            hits: list[tuple[str, str]] = []
            cursor = None
            for _ in range(30):
                text = await _text(
                    client, "search_events", text="hay", limit=50, **({"cursor": cursor} if cursor else {})
                )
                hits += re.findall(r"^session #(\d+) .* · event #(\d+) ", text, re.MULTILINE)
                more = re.search(r'cursor="([^"]+)"', text)
                if more is None:
                    break
                cursor = more.group(1)
            assert len(hits) == len(set(hits)) == 300 + 49
            assert {seq for session, seq in hits if session == str(run.pk)} == {str(n) for n in range(1, 301)}
            await _text(client, "compare_sessions", sessionA=str(run.pk), sessionB=str(run.pk))

    anyio.run(main)


def test_asking_for_a_prompt_is_the_clients_mistake_not_an_internal_error(transactional_db, caplog):
    # The SDK answered an unknown prompt with -32603 and a traceback in the log; there are none.
    from mcp.shared.exceptions import MCPError
    from mcp.types import INVALID_PARAMS

    said: list[MCPError] = []
    server = build_server(actor=Actor(user=member("prompt-asker")))

    async def main() -> None:
        async with Client(server) as client:
            assert (await client.list_prompts()).prompts == []
            try:
                await client.get_prompt("review_session")
            except MCPError as error:
                said.append(error)

    anyio.run(main)
    [error] = said
    assert error.error.code == INVALID_PARAMS and "Unknown prompt: 'review_session'" in error.error.message
    assert "Traceback" not in caplog.text


def test_the_instructions_and_descriptions_state_the_budget_in_force():
    from sessions_app.mcp.server import FIND_ERRORS, INSTRUCTIONS, REPLAY_SESSION

    assert f"at most {BUDGET:,} characters" in INSTRUCTIONS
    assert f"pass {BUDGET:,} characters" in REPLAY_SESSION and "budget" in FIND_ERRORS


def test_the_stdio_server_stops_acting_for_a_key_revoked_or_a_user_deactivated_while_it_runs(transactional_db):
    # `manage.py mcp --key` fixed its actor at start: a revoked key, a deactivated user went on
    # reading every session (HTTP checks each request; the keys page promises "at once").
    from sessions_app import teams
    from sessions_app.management.commands.mcp import identity

    run = create_session(project=Project.get_default(), source_format="canonical",
                         meta=SessionMeta(source_session_id="stdio_run"))  # fmt: skip
    append_events(session=run, events=synthetic_events(3))
    user = member("stdio-viewer", role=Role.VIEWER)
    raw = key_of(user)
    # One server each, as a process is; a client a call (a client is entered once).
    by_key = build_server(actor=identity(key=raw, user=None))
    by_user = build_server(actor=identity(key=None, user="stdio-viewer"))
    said: list[tuple[bool, str]] = []

    async def call(server) -> None:
        async with Client(server) as client:
            result = await client.call_tool("list_sessions", {})
            said.append((result.is_error, result.content[0].text))

    anyio.run(call, by_key)
    teams.revoke_key(actor="test", api_key=ApiKey.objects.get(user=user))
    anyio.run(call, by_key)
    anyio.run(call, by_user)
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    anyio.run(call, by_user)
    assert [error for error, _ in said] == [False, True, False, True]
    assert "stdio_run" in said[0][1] and "stdio_run" in said[2][1]
    assert "the API key is invalid or revoked" in said[1][1] and "acts for no one now" in said[1][1]
    assert "no active user named 'stdio-viewer'" in said[3][1]
