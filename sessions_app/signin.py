"""Sign-in: the audit entries of signing in and out, and the page of a throttled sign-in.

The entries come from Django's auth signals (user_logged_in, user_login_failed,
user_logged_out), connected in apps.py. Signals are otherwise avoided (the house style), but
they are Django's only hook for a sign-in made by any view: our login page, the admin's, and
whatever view a later change adds, each calling `authenticate()` and `login()` itself.

Failed sign-ins are throttled by django-axes per username and address (settings.AXES_*): after
REPLAY_LOGIN_FAILURE_LIMIT failures in a row even the right password is refused until the
cool-off ends, and `locked_out` answers with a page saying when to try again. Changing one's
password checks the current one the same way (`PasswordChangeView`): a stolen session cookie
must not be a way to guess the password without limit or record.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from axes.utils import reset as axes_reset
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.db.models import Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from . import audit
from .access import ANONYMOUS, Actor


class LockoutBackend(AxesStandaloneBackend):
    """django-axes' backend (it refuses a locked-out username and address before any password
    is checked), marking the request it refuses. axes' own flag is also set by the failure that
    starts a lockout, so only this one tells a refused attempt from a wrong password, whichever
    signal receiver runs first."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> None:  # fmt: skip
        try:
            return super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:
            request.sign_in_refused = True
            raise


def record_login(sender: Any, *, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    username = user.get_username()
    audit.record(
        action="auth.login", actor=Actor(user=user), target=f"user:{username}"[:200], ip=audit.client_ip(request)
    )


def record_login_failed(sender: Any, *, credentials: dict[str, Any], request: HttpRequest | None = None,
                        **kwargs: Any) -> None:  # fmt: skip
    # Only the username is taken from the credentials: Django masks the password in them, but
    # nothing of it belongs in the log, not even its mask.
    username = str(credentials.get(get_user_model().USERNAME_FIELD) or "")[:150]
    detail: dict[str, Any] = {"username": username}
    if getattr(request, "sign_in_refused", False):
        detail["locked_out"] = True
    actor = ANONYMOUS
    if getattr(request, "changing_password", False):
        # A signed-in session guessing its own password: who, and that it was there.
        detail["on"] = "password change"
        actor = Actor(user=request.user)
    audit.record(action="auth.login_failed", actor=actor, target=f"user:{username}", detail=detail,
                 ip=audit.client_ip(request))  # fmt: skip


def record_logout(sender: Any, *, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None:  # signing out without being signed in
        return
    username = user.get_username()
    audit.record(
        action="auth.logout", actor=Actor(user=user), target=f"user:{username}"[:200], ip=audit.client_ip(request)
    )


def try_again_at(request: HttpRequest, username: str) -> datetime | None:
    """When the lockout of this username and address ends: its last counted failure plus the
    cool-off (a refused attempt is not counted: AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT)."""
    cool_off = get_cool_off(request)
    if cool_off is None:
        return None
    last = AccessAttempt.objects.filter(username=username, ip_address=audit.client_ip(request)).aggregate(
        last=Max("attempt_time")
    )["last"]
    return (last or timezone.now()) + cool_off


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None) -> HttpResponse:
    """The answer to a refused sign-in (settings.AXES_LOCKOUT_CALLABLE): the sign-in page's
    layout, saying why and when to try again, with 429 Too Many Requests."""
    username = get_client_username(request, credentials) or ""
    until = try_again_at(request, username)
    minutes = max(1, math.ceil((until - timezone.now()).total_seconds() / 60)) if until is not None else None
    context = {
        "username": username,
        "failure_limit": get_failure_limit(request, credentials),
        "try_again_at": until,
        "minutes": minutes,
    }
    return render(request, "registration/locked_out.html", context, status=429)


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """Django's form, the current password checked by `authenticate()` instead of by the user
    row: through django-axes (the failures count toward the sign-in lockout of this username
    and address, and a locked-out one is refused even the right password) and recorded as
    `auth.login_failed` like a failed sign-in."""

    def __init__(self, user: Any, *args: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.request = request

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        username = self.user.get_username()
        if self.request is not None:
            self.request.changing_password = True  # said in the audit entry of a failure
        if authenticate(self.request, username=username, password=old_password) is None:
            raise ValidationError(self.error_messages["password_incorrect"], code="password_incorrect")
        # The right password clears the failures before it, as a sign-in does (axes resets on
        # user_logged_in, which a password change never sends): a typo later is not a lockout.
        axes_reset(ip=audit.client_ip(self.request), username=username)
        return old_password


# Django's form views take PUT as POST; a browser's form sends only GET and POST.
FORM_METHODS = ["get", "post", "head", "options"]


class PasswordChangeView(auth_views.PasswordChangeView):
    form_class = PasswordChangeForm
    http_method_names = FORM_METHODS

    def get_form_kwargs(self) -> dict[str, Any]:
        return super().get_form_kwargs() | {"request": self.request}
