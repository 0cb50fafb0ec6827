"""Request checks that apply to every view."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse


def refuse_nul_in_query(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A query string holding a NUL character (`%00`) is answered 400 before any view runs:
    PostgreSQL refuses the character in any text it compares, so a filter or search holding it
    would otherwise fail inside the database (a 500), and no real search contains it."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if "%00" in request.META.get("QUERY_STRING", ""):
            detail = "the query string holds a NUL character (%00), which no parameter accepts"
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": detail}, status=400)
            return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")
        return get_response(request)

    return middleware
