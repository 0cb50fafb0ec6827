"""The write side of the API: live ingest, uploads, paced streams (issue 5)."""

from __future__ import annotations

from ninja import Router

from .api import ApiKeyAuth

router = Router(auth=ApiKeyAuth(), tags=["ingest"])
