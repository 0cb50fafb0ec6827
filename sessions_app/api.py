"""The ninja routers: thin, they validate and call the workflow modules."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import NinjaAPI, Router
from ninja.security import HttpBearer, SessionAuth

from .models import ApiKey


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer <key>`; keys are stored hashed (models.ApiKey)."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        return ApiKey.authenticate(token)


# An API key, or the dashboard's own login cookie (so the player's scripts can call the API);
# anonymous requests get 401. SessionAuth checks CSRF on unsafe methods.
API_AUTH = [ApiKeyAuth(), SessionAuth()]

router = Router(auth=API_AUTH, tags=["sessions"])


def register(api: NinjaAPI) -> None:
    from .api_write import router as write_router

    api.add_router("", router)
    api.add_router("", write_router)
