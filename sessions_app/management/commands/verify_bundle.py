"""`manage.py verify_bundle FILE [--key PUBKEY]`: check an evidence bundle with no database.

Thin: sessions_app/bundle_reader.read_bundle does the checking (signature, file hashes, the
event chain); this prints what it found and exits non-zero naming the first mismatch.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_app.bundle_reader import BundleError, read_bundle
from sessions_app.lookalikes import shown_plainly
from sessions_app.signing import grouped


class Command(BaseCommand):
    help = "Check an evidence bundle's signature, file hashes and event chain (no database needed)."
    # The system checks would open the database; a bundle is checked without one.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="the bundle (.zip)")
        parser.add_argument(
            "--key", help="the signing server's public key (base64, from its About page or GET /api/signing-key)"
        )

    def handle(self, *args, file: str, key: str | None, **options) -> None:
        try:
            bundle = read_bundle(file, key=key)
        except BundleError as error:
            raise CommandError(f"bundle NOT OK: {_plain(error)}") from None
        session, chain = bundle.session, bundle.chain
        pinned = (
            "the pinned key"
            if bundle.pinned
            else "the key inside the bundle (NOT pinned: pass --key to prove who signed it)"
        )
        # What the bundle says is printed with its control and direction characters written
        # out: a terminal would obey an escape sequence in `exported_by` (a forged bundle's
        # could move the cursor and print "the pinned key" over the line that says it is not).
        files = ", ".join(map(_plain, bundle.manifest["files"]))
        lines = [
            "bundle OK",
            f"  signature: Ed25519 by {pinned}, fingerprint {grouped(bundle.fingerprint)}",
            f"  files: {len(bundle.manifest['files'])} match their SHA-256 ({files})",
            f"  chain: {bundle.events_checked} events, seq {_plain(chain['first_seq'])}..{_plain(chain['last_seq'])}, "
            f"head {_plain(chain['head'])}",
            f"  session: {_plain(session.get('id'))} of project {_plain(repr(session.get('project')))}, "
            f"{_plain(session.get('format'))}, task {_plain(repr(str(session.get('task', ''))[:80]))}",
            f"  comments: {len(bundle.comments)} thread{'' if len(bundle.comments) == 1 else 's'}; "
            f"sign-offs: {len(bundle.reviews)}",
            _redactions(bundle.redactions),
            # (a bundle that names neither still verifies: say so, not a traceback)
            f"  exported {_plain(bundle.manifest.get('exported_at') or 'at no stated time')} "
            f"by {_plain(bundle.manifest.get('exported_by') or 'no one named')}",
        ]
        self.stdout.write("\n".join(lines))


def _plain(value: object) -> str:
    return shown_plainly(str(value))


def _redactions(entries: list[dict]) -> str:
    """The values removed after the fact, as the chain checked them (never the values)."""
    if not entries:
        return "  redactions: none"
    events = len({entry["seq"] for entry in entries})
    first = ", ".join(
        _plain(f"seq {e['seq']} {e['field']} [{e['label']}] by {e.get('by') or '?'}") for e in entries[:5]
    )
    more = f", and {len(entries) - 5} more" if len(entries) > 5 else ""
    return f"  redactions: {len(entries)} removals in {events} events, their commitments checked: {first}{more}"
