"""The evidence bundle of a session, and the public key that signs bundles."""

from __future__ import annotations

from django.http import HttpRequest, StreamingHttpResponse
from django.utils.http import content_disposition_header
from ninja import Field, Router, Schema

from .. import access, audit, bundles, signing
from .schemas import NOT_FOUND, Id

router = Router(tags=["bundles"])


class SigningKeyOut(Schema):
    algorithm: str = Field(description="always Ed25519")
    public_key: str = Field(description="base64 of the raw 32-byte public key: verify_bundle's --key")
    fingerprint: str = Field(description="the first 16 hex characters of the SHA-256 of the raw key")


@router.get("/signing-key", response=SigningKeyOut, url_name="signing_key")
def signing_key(request: HttpRequest):
    """The public key this server signs evidence bundles with: pin it when checking a bundle
    (`manage.py verify_bundle FILE --key PUBLIC_KEY`)."""
    key = signing.server_key()
    return {"algorithm": signing.ALGORITHM, "public_key": key.public_key, "fingerprint": key.fingerprint}


@router.get("/sessions/{session_id}/bundle", response={200: None, **NOT_FOUND}, url_name="bundle")
def bundle(request: HttpRequest, session_id: Id):
    """Stream the session's signed evidence bundle (.zip): events with their hashes, the
    original upload, comments, sign-offs, a signed manifest and an offline player (docs/bundles.md)."""
    session = access.session_for(request, session_id)
    stream = bundles.stream_bundle(session=session, exported_by=access.actor_of(request).name)
    audit.record_on_session(request, "bundle.export", session, events=stream.events, head=stream.head)
    response = StreamingHttpResponse(stream, content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(True, bundles.bundle_filename(session))
    return response
