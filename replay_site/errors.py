"""Django's error handlers (replay_site/urls.py): the API's URLs answer JSON; a page refused
(403) or not found (404) is the site's refusal page naming why (templates/refusal.html); a
request Django could not read says why."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.middleware.csrf import REASON_INSECURE_REFERER, REASON_NO_CSRF_COOKIE, REASON_NO_REFERER
from django.shortcuts import render
from django.views.defaults import bad_request

from sessions_app.access import holds_share_links


def _under_api(request: HttpRequest) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def not_found_page(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A JSON 404 for any URL under /api/ that names no operation (a mistyped path, a trailing
    slash, a path segment no converter takes), the refusal page everywhere else."""
    if _under_api(request):
        return JsonResponse({"detail": f"no API operation at {request.path}"}, status=404)
    # The access helpers' messages ("session 5 not found") say the same for a missing object and
    # for one the caller may not see, so naming them leaks nothing. Any other 404 (a URL no view
    # took, an unknown share link) says only that: not the address, which may hold a token.
    reason = _message(exception) or "there is nothing at this address"
    if _visitor_with_links(request):
        # Most likely the page a link opened, since revoked or expired (said alike for a page no
        # link of theirs ever opened: whether it exists stays unsaid).
        reason += (
            ". A share link opens only the pages it was made for, and only while it is active: "
            "this page is not one of them, or the link this browser holds was revoked or has "
            "expired. Ask whoever sent it for a new one."
        )
    return refusal(request, status=404, title="Not found", reason=reason)


def _visitor_with_links(request: HttpRequest) -> bool:
    """A signed-out browser that has opened share links (sessions_app/access.py)."""
    user = getattr(request, "user", None)
    return (user is None or not user.is_authenticated) and holds_share_links(request)


def forbidden_page(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A 403 naming what the role does not allow ("session 5: this needs the maintainer role in
    its project"), where Django's own page says only "403 Forbidden"."""
    if _under_api(request):
        return JsonResponse({"detail": _message(exception) or "forbidden"}, status=403)
    reason = _message(exception) or "your role in this project does not allow this"
    return refusal(request, status=403, title="Not allowed", reason=reason)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Django's CSRF refusal (settings.CSRF_FAILURE_VIEW) as the site's refusal: a form sent
    from a page older than the browser's sign-in (signed in again in another tab) or through a
    proxy that changes the origin. Django's own page has no #refusal, so a panel's form that
    met it was swapped away whole, with what had been typed (static/js/replay.js keeps the
    panel for a refusal). Django's `reason` names the cookie or the header; it is logged by
    Django, the user is told what to do."""
    if _under_api(request):
        return JsonResponse({"detail": "CSRF check failed: send the page's CSRF token, or use an API key"}, status=403)
    return refusal(request, status=403, title="Not sent", reason=_what_would_help(reason))


def _what_would_help(reason: str) -> str:
    """What a CSRF refusal tells the user to do, by Django's reason: reloading helps a stale
    page only, and a page at an address the server does not trust, or a browser that sends no
    cookies, is refused again however often it is reloaded."""
    if reason == REASON_INSECURE_REFERER:
        return "this page was opened over http, and the site takes forms over https only: open it at its https address"
    if reason.endswith("does not match any trusted origins."):  # Django's REASON_BAD_ORIGIN, REASON_BAD_REFERER
        return (
            "this page's address is not one the server trusts for forms, so reloading will not help: "
            "its operator lists the address it is reached at in REPLAY_CSRF_TRUSTED_ORIGINS (docs/deployment.md)"
        )
    if reason == REASON_NO_REFERER:
        return "the browser sent no Referer header, which a form sent over HTTPS needs: allow it for this site"
    if reason == REASON_NO_CSRF_COOKIE:
        return "the browser did not send this site's cookies: allow cookies for this site, then reload and send the form again"
    return (
        "this page is out of date (you may have signed in again since it was opened); reload it and send the form again"
    )


def _message(exception: Exception) -> str:
    return exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""


def refusal(request: HttpRequest, *, status: int, title: str, reason: str) -> HttpResponse:
    """The refusal page; to htmx (a panel asking) only its #refusal partial, which base.html's
    responseHandling swaps into that panel instead of a whole page."""
    template = "refusal.html#refusal" if request.headers.get("HX-Request") else "refusal.html"
    return render(request, template, {"status": status, "title": title, "reason": reason}, status=status)


def bad_request_page(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 for a request it could not read (raised before any view runs: the CSRF
    check reads the form). A malformed upload (a truncated body, a missing boundary) says so;
    other reasons keep Django's page, which names none (they may be about a host or a cookie)."""
    if isinstance(exception, MultiPartParserError):
        detail = f"the upload cannot be read: {exception}"
        if _under_api(request):
            return JsonResponse({"detail": detail}, status=400)
        return HttpResponse(detail, status=400, content_type="text/plain; charset=utf-8")
    return bad_request(request, exception)
