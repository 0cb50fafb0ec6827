"""Django's error handlers (replay_site/urls.py): the API's URLs answer JSON, pages Django's own
pages, and a request Django could not read says why."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.views.defaults import bad_request, page_not_found


def _under_api(request: HttpRequest) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def not_found_page(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A JSON 404 for any URL under /api/ that names no operation (a mistyped path, a trailing
    slash, a path segment no converter takes), Django's page everywhere else."""
    if _under_api(request):
        return JsonResponse({"detail": f"no API operation at {request.path}"}, status=404)
    return page_not_found(request, exception)


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
