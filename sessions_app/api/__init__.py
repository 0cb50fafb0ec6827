"""The JSON API: one thin ninja Router per resource, assembled into the `router` that
replay_site/api.py mounts under /api/. docs/api.md describes every endpoint."""

from ninja import Router

from . import (
    agentlens,
    bundles,
    checkpoints,
    comments,
    compare,
    exports,
    imports,
    live,
    projects,
    redaction,
    redactions,
    replay,
    reviews,
    sessions,
    sharing,
    tours,
)
from .auth import API_AUTH

# Every operation needs a key or the login cookie. The order is the OpenAPI schema's order.
router = Router(auth=API_AUTH)
for resource in (sessions, replay, compare, checkpoints, comments, reviews, exports, bundles, live, agentlens, imports, projects,
                 redaction, redactions, tours, sharing):  # fmt: skip
    router.add_router("", resource.router)
