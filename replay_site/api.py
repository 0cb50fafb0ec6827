"""The NinjaAPI: JSON under /api/, OpenAPI at /api/openapi.json, interactive docs at /api/docs."""

from ninja import NinjaAPI
from ninja.renderers import BaseRenderer
import orjson


class OrjsonRenderer(BaseRenderer):
    # The stdlib json module is 3-5x slower on replay pages (../shared/PERFORMANCE.md).
    media_type = "application/json"

    def render(self, request, data, *, response_status):
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


api = NinjaAPI(
    title="Replay API",
    version="1.0",
    description="Replay recorded LLM-agent sessions: any step, with its full context, a page at a time.",
    renderer=OrjsonRenderer(),
    urls_namespace="api",
)

from sessions_app.api import register  # noqa: E402  (routers need `api` to exist)

register(api)
