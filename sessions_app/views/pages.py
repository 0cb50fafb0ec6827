"""What every dashboard page shares: sign-in, and htmx partials of one template per page.

An htmx request gets the named partial of the page's template (whose root element has the
partial's name as id); a history-restore request and a plain request get the full page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages as django_messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect

from .. import access


def login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous visitors go to the login page and never reach a view's data. htmx would follow
    a plain redirect and swap the login form into a panel, so it is told to load the page."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        return _to_login(request)

    return wrapper


def signed_in_or_shared(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`login_required`, except that a browser that opened a share link passes too: for the
    player's pages, whose lookup (access.session_for, tour_for) decides what it may read."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated or access.holds_share_links(request):
            return view(request, *args, **kwargs)
        return _to_login(request)

    return wrapper


def _to_login(request: HttpRequest) -> HttpResponse:
    if request.htmx:
        current = request.htmx.current_url_abs_path or request.get_full_path()
        return HttpResponseClientRedirect(redirect_to_login(current).url)
    return redirect_to_login(request.get_full_path())


def wants_partial(request: HttpRequest) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def render_page(request: HttpRequest, template: str, partial: str, context: dict[str, Any]) -> HttpResponse:
    name = f"{template}#{partial}" if wants_partial(request) else template
    response = render(request, name, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def player_link_suffix(state: dict[str, Any], *, changed_only: bool = False) -> str:
    """The query string every step link of the player carries after `?step=N` (the viewer's
    kinds, speed and pace; PlayerForm's values): built once per frame, not once per link.
    `changed_only`: those not at the player's defaults, or "" (a tour's stop links carry them,
    so that a stop in another session plays as this one did)."""
    params: list[tuple[str, str]] = [("types", kind) for kind in state["types"]]
    if not changed_only or state["speed"] != "1":
        params.append(("speed", state["speed"]))
    if not changed_only or state["pace"] != "steps":
        params.append(("pace", state["pace"]))
    return "&" + urlencode(params) if params else ""


def take_messages(request: HttpRequest, *tags: str) -> dict[str, list[str]]:
    """The queued messages (django.contrib.messages) tagged with one of `tags`, by tag, for the
    page meant to say them once; any other stays queued for its own page. One pass: Django's
    storage gives its messages again to a second one."""
    storage = django_messages.get_messages(request)
    taken: dict[str, list[str]] = {tag: [] for tag in tags}
    for message in list(storage):
        tag = next((tag for tag in message.extra_tags.split() if tag in taken), None)
        if tag is None:
            storage.add(message.level, message.message, message.extra_tags)
        else:
            taken[tag].append(str(message))
    return taken


# A destructive form's <noscript> field: present only when the browser runs no script, so only
# then does the server ask (with script, hx-confirm or data-confirm asked before the post).
ASK_FIRST = "ask_first"


def asked_first(request: HttpRequest, *, question: str, answer: str, back: str) -> HttpResponse | None:
    """The question page when a destructive form came from a browser without JavaScript, else
    None (go on). Its form posts the same fields again, without ASK_FIRST: that post acts."""
    if not request.POST.get(ASK_FIRST) or request.htmx:
        return None
    fields = [(name, value) for name, value in request.POST.items() if name not in (ASK_FIRST, "csrfmiddlewaretoken")]
    context = {"question": question, "answer": answer, "back": back, "action": request.path, "fields": fields}
    return render(request, "confirm.html", context)
