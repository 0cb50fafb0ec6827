"""Who may call the API (an API key or the dashboard's login cookie) and who a request is."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from ..access import actor_of
from ..models import ApiKey


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer <key>`; keys are stored hashed (models.ApiKey). A revoked key, or
    a key of an inactive or deleted user, is refused (401)."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        return ApiKey.authenticate(token)


class LoginCookieAuth(SessionAuth):
    """The dashboard's login cookie. Without a session cookie there is nothing to check, so a
    request with a wrong API key gets 401, not the 403 of a CSRF check it never needed."""

    def _get_key(self, request: HttpRequest) -> str | None:
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return None
        return super()._get_key(request)


# An API key, or the dashboard's own login cookie (so the player's scripts can call the API);
# anonymous requests get 401. The cookie path checks CSRF on unsafe methods.
API_AUTH = [ApiKeyAuth(), LoginCookieAuth()]


def who(request: HttpRequest) -> str:
    """The `created_by` of what a request makes (uploads, checkpoints): the user, whether
    signed in or acting through one of their keys."""
    return actor_of(request).name
