"""The write side of the API: live ingest, uploads, paced streams (issue 5)."""

from __future__ import annotations

from ninja import Router

from .api import API_AUTH

router = Router(auth=API_AUTH, tags=["ingest"])
