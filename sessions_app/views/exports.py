"""The player's export page: the API's exports (replay/exports.py) behind the dashboard's
sign-in, so a share link's visitor can download them when the link allows it (members may
always, as in the API)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotFound, StreamingHttpResponse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from .. import access, audit
from ..forms import ExportForm
from ..replay import exports
from .pages import signed_in_or_shared


@signed_in_or_shared
@require_GET
def export(request: HttpRequest, session_id: int) -> HttpResponse:
    form = ExportForm(request.GET)
    session = access.session_to_export(request, session_id, format=form.data.get("format"))
    if not form.is_valid():
        return HttpResponseBadRequest(
            "format: one of " + ", ".join(exports.EXPORT_FORMATS), content_type="text/plain; charset=utf-8"
        )
    try:
        stream, content_type, filename = exports.export_download(session=session, format=form.cleaned_data["format"])
    except exports.NothingToExport as nothing:
        return HttpResponseNotFound(str(nothing), content_type="text/plain; charset=utf-8")
    audit.record_on_session(request, "session.export", session, format=form.cleaned_data["format"])
    response = StreamingHttpResponse(stream, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(True, filename)
    return response
