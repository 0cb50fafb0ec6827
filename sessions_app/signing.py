"""The server's signing key: one Ed25519 key that signs evidence bundles (sessions_app/bundles.py).

It lives outside the database, in a PEM file (`REPLAY_SIGNING_KEY_FILE`, by default under the
data folder): a database dump or a restored backup then never carries the means to sign, and
whoever can rewrite rows still cannot forge a bundle. The key is made on first use, readable by
its owner only; a file that is there but is not an Ed25519 private key stops the process with
ImproperlyConfigured rather than silently making a new key (old bundles would no longer match).

The checking half (`public_key_from_text`, `verify`, `fingerprint`) needs no settings and no
database, so a bundle can be checked anywhere (sessions_app/bundle_reader.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "Ed25519"


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    public_key: str  # base64 of the raw 32 bytes
    fingerprint: str  # 16 hex characters

    def sign(self, data: bytes) -> str:
        """The base64 Ed25519 signature of `data`."""
        return base64.b64encode(self.private.sign(data)).decode("ascii")


_loaded: dict[Path, SigningKey] = {}


def server_key() -> SigningKey:
    """The server's key, made on first use (settings.SIGNING_KEY_FILE)."""
    from django.conf import settings

    path = Path(settings.SIGNING_KEY_FILE)
    if path not in _loaded:
        _loaded[path] = load_or_create(path)
    return _loaded[path]


def load_or_create(path: Path) -> SigningKey:
    """The key in `path`, made there (0600) when the file is missing."""
    from django.core.exceptions import ImproperlyConfigured

    if not path.exists():
        try:
            _create(path)
        except OSError as error:  # a folder that is a file, or cannot be made: said, not a traceback
            raise ImproperlyConfigured(f"REPLAY_SIGNING_KEY_FILE {path} cannot be made: {error}") from None
    try:
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as error:
        raise ImproperlyConfigured(
            f"REPLAY_SIGNING_KEY_FILE {path} is not a readable, unencrypted PEM private key: {error}"
        ) from None
    if not isinstance(private, Ed25519PrivateKey):
        raise ImproperlyConfigured(f"REPLAY_SIGNING_KEY_FILE {path} holds a {type(private).__name__}, not Ed25519")
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return SigningKey(private=private, public_key=base64.b64encode(raw).decode("ascii"), fingerprint=fingerprint(raw))


def _create(path: Path) -> None:
    """Write a new key beside `path` and link it into place: two processes starting at once end
    with the same key (the second link fails, and it reads the first's), never half a file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".signing-key-")  # mode 0600
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)


# --- checking (no settings, no database) ------------------------------------------------------


def fingerprint(raw_public_key: bytes) -> str:
    """The key's short name: the first 16 hex characters of the SHA-256 of its raw bytes."""
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


def grouped(fingerprint_text: str) -> str:
    """A fingerprint as people read it aloud: `3f9a 01bc 77d2 e410`."""
    return " ".join(fingerprint_text[i : i + 4] for i in range(0, len(fingerprint_text), 4))


def public_key_from_text(text: str) -> tuple[Ed25519PublicKey, bytes]:
    """A public key given as base64 of its raw 32 bytes (what /api/signing-key and a bundle's
    manifest give); ValueError when it is not one."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not base64") from None
    if len(raw) != 32:
        raise ValueError(f"is {len(raw)} bytes, an Ed25519 public key is 32")
    return Ed25519PublicKey.from_public_bytes(raw), raw


def verify(public: Ed25519PublicKey, signature_b64: str, data: bytes) -> bool:
    """Whether `signature_b64` (base64) is `public`'s signature of `data`."""
    try:
        signature = base64.b64decode(signature_b64.strip(), validate=True)
        public.verify(signature, data)
    except (binascii.Error, ValueError, InvalidSignature):
        return False
    return True
