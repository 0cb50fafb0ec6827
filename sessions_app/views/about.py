"""The About page: the version, and the public key that signs evidence bundles."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .. import signing
from .pages import login_required


def _version() -> str:
    try:
        return version("replay")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@login_required
@require_GET
def about(request: HttpRequest) -> HttpResponse:
    key = signing.server_key()
    return render(request, "sessions_app/about.html", {
        "version": _version(), "algorithm": signing.ALGORITHM, "public_key": key.public_key,
        "fingerprint": signing.grouped(key.fingerprint),
    })  # fmt: skip
