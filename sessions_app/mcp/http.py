"""/mcp: the tools over MCP's streamable HTTP transport, for a remote assistant, mounted in
replay_site/asgi.py beside Django.

Every request carries an API key (`Authorization: Bearer <key>`, models.ApiKey); without a
valid one the answer is 401 before the MCP SDK sees the request. The authenticated actor rides
in the request's ASGI scope to the tools (server.SCOPE_ACTOR).

Stateless, with JSON responses: each POST is a whole exchange, so any web process can answer
any request (`manage.py serve` runs several), nothing is kept between requests, and one key's
request can never be served in another key's MCP session. The SDK's session manager still needs
a task group for the duration of the server: `running()` is entered in the ASGI lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host
from mcp.server.transport_security import TransportSecuritySettings

from ..access import Actor
from ..models import ApiKey
from .server import SCOPE_ACTOR, build_server

PATH = "/mcp"


def _authenticate(token: str) -> ApiKey | None:
    close_old_connections()
    try:
        return ApiKey.authenticate(token)
    finally:
        close_old_connections()


def _bearer(scope) -> str:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _host_allowed(scope) -> bool:
    """Django's own Host check (ALLOWED_HOSTS), which every other route passes through."""
    host = next((value.decode("latin-1") for name, value in scope.get("headers") or () if name == b"host"), "")
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)


def _security_headers() -> tuple[tuple[bytes, bytes], ...]:
    """What Django's middleware gives every other answer of the server (/mcp bypasses it):
    session data is never cached, never sniffed as another type, never framed; the referrer
    and opener policies, and HSTS where the deployment turned it on."""
    headers = [
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
        (b"referrer-policy", settings.SECURE_REFERRER_POLICY.encode()),
        (b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()),
    ]
    if settings.SECURE_HSTS_SECONDS:
        hsts = f"max-age={settings.SECURE_HSTS_SECONDS}"
        hsts += "; includeSubDomains" if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS else ""
        hsts += "; preload" if settings.SECURE_HSTS_PRELOAD else ""
        headers.append((b"strict-transport-security", hsts.encode()))
    return tuple(headers)


def _secured(send):
    """`send` with the security headers set on the response's start (replacing the SDK's own)."""
    security = _security_headers()
    names = frozenset(name for name, _ in security)

    async def secured_send(message) -> None:
        if message["type"] == "http.response.start":
            kept = [(name, value) for name, value in message.get("headers") or () if name.lower() not in names]
            message = {**message, "headers": [*kept, *security]}
        await send(message)

    return secured_send


async def _refuse(send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = orjson.dumps({"detail": detail})
    await _secured(send)(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                        *headers],
        }
    )  # fmt: skip
    await send({"type": "http.response.body", "body": body})


class McpEndpoint:
    """The ASGI application of /mcp."""

    def __init__(self) -> None:
        self.server = build_server()
        self.app = self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            # The SDK's DNS-rebinding guard would allow only localhost; the Host check here is
            # Django's ALLOWED_HOSTS instead, and no request reaches a tool without a key.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.started = False

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's session manager, for as long as the server runs (the ASGI lifespan)."""
        async with self.server.session_manager.run():
            self.started = True
            try:
                yield
            finally:
                self.started = False

    async def __call__(self, scope, receive, send) -> None:
        if not _host_allowed(scope):
            await _refuse(send, 400, "the Host header is not one of REPLAY_ALLOWED_HOSTS")
            return
        token = _bearer(scope)
        key = await sync_to_async(_authenticate, thread_sensitive=False)(token) if token else None
        if key is None:
            detail = "invalid or revoked API key" if token else "send an API key as 'Authorization: Bearer <key>'"
            await _refuse(send, 401, detail, [(b"www-authenticate", b'Bearer realm="replay"')])
            return
        if scope.get("method") != "POST":
            # Stateless: no stream outlives its POST, so a GET's event stream could never carry
            # anything (the SDK would answer 200 and hold it open for ever), and there is no
            # session to DELETE. MCP's clients take a 405 as "no server-initiated stream".
            await _refuse(send, 405, f"{PATH} takes only POST: each exchange is one POST", [(b"allow", b"POST")])
            return
        if not self.started:
            await _refuse(send, 503, "the MCP endpoint starts with the server's ASGI lifespan, which did not run")
            return
        await self.app({**scope, SCOPE_ACTOR: Actor(user=key.user, key=key)}, receive, _secured(send))
