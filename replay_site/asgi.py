"""The application the production server runs (`manage.py serve`, docs/deployment.md).

Replay's pages and JSON API are synchronous Django views. Under Django's ASGI handler every
synchronous view of a process runs on one shared thread, so a process would serve one page at a
time (docs/benchmarks.md). So requests go three ways:

- the Server-Sent Event streams go to Django's ASGI handler, where they wait for their next
  event without holding a thread (sessions_app/replay/streaming.py);
- /mcp goes to the MCP server (sessions_app/mcp/http.py), whose SDK is asynchronous;
- everything else goes to Django's WSGI handler through a2wsgi's thread pool
  (REPLAY_WEB_THREADS threads per process), as under a threaded WSGI server.

Static files are served by whitenoise's middleware (settings.MIDDLEWARE) on both ways.
"""

import os
import re

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")

from a2wsgi import WSGIMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from granian.utils.proxies import wrap_asgi_with_proxy_headers  # noqa: E402

from replay_site.serving import require_real_secret_key, require_signing_key, tune_garbage_collector  # noqa: E402

streams = get_asgi_application()
require_real_secret_key()
require_signing_key()
pages = WSGIMiddleware(get_wsgi_application(), workers=settings.WEB_THREADS)

from sessions_app.mcp.http import McpEndpoint  # noqa: E402  (after Django is set up)

mcp = McpEndpoint()
tune_garbage_collector()

# The routes whose views return an asynchronous stream under ASGI (sessions_app/api/live.py, and
# the player's own tail in sessions_app/views/player.py).
STREAMS = re.compile(r"^/(?:api/sessions/[^/]+/(?:stream|tail)|sessions/[^/]+/tail)/?$")
MCP = re.compile(r"^/mcp(?:/|$)")


async def application(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
    elif scope["type"] == "http" and STREAMS.match(scope["path"]):
        await streams(scope, receive, send)
    elif scope["type"] == "http" and MCP.match(scope["path"]):
        await mcp(scope, receive, send)
    else:

        async def receive_coroutine():
            # a2wsgi hands receive() to asyncio.run_coroutine_threadsafe, which takes only a
            # coroutine; granian's receive returns another awaitable.
            return await receive()

        await pages(scope, receive_coroutine, send)


if settings.BEHIND_PROXY:
    # The client's address from X-Forwarded-For (the last address no trusted proxy added), when
    # the connection comes from one of REPLAY_TRUSTED_PROXIES; otherwise the peer's own address.
    # Without it every client had the proxy's address in the audit log and in sign-in locks.
    application = wrap_asgi_with_proxy_headers(application, trusted_hosts=settings.TRUSTED_PROXIES)


async def _lifespan(receive, send) -> None:
    """Django opens its connections on first use. The MCP endpoint's session manager runs from
    startup to shutdown, entered and left in this one task, as its task group requires."""
    while (await receive())["type"] != "lifespan.startup":
        pass
    async with mcp.running():
        await send({"type": "lifespan.startup.complete"})
        while (await receive())["type"] != "lifespan.shutdown":
            pass
    await send({"type": "lifespan.shutdown.complete"})
