"""MCP arguments and methods a client may get wrong: every integer argument of every tool is
bounded in its input schema, so a number past 64 bits is a validation message naming the
argument (it crashed inside the tool: OverflowError, "Error executing tool"); and /mcp, which is
stateless, answers a GET (a stream nothing could ever be sent on) with 405, not a stream held
open for ever. Found by a security review against a running server.
"""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session
from sessions_app.mcp.http import McpEndpoint
from sessions_app.mcp.server import build_server
from sessions_app.models import ApiKey, Project, Role

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
