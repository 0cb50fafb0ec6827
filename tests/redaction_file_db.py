"""A file-based SQLite database for tests/test_redaction_after.py, which must read the database
file's bytes: pytest-django keeps SQLite test databases in memory. Run in a subprocess with
DATABASE_URL (sqlite:////abs/path) and REPLAY_DATA_DIR set:

    python -m tests.redaction_file_db build FILE   migrate, import FILE (its original kept),
                                                   comment on it and sign it off; prints the
                                                   session's id
    python -m tests.redaction_file_db redact ID SECRET SEQ
                                                   redact SECRET as a maintainer would at SEQ,
                                                   purge the database files, verify; then edit
                                                   another event's payload with raw SQL and
                                                   verify again; prints what each found (JSON)

`session_lines` writes the canonical JSONL such a FILE holds (also used in-process).
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

COUNT = 10_000
SECRET = "TOPSECRET-4f9a1c2e7b88-value"
# Where the secret is: payloads of these seqs, one step's state, one state change.
SECRET_SEQS = (3, 4_000, 9_998)
STEP_SEQ = 5_001
CHANGE_SEQ = 6_002
TAMPERED_SEQ = 7_777


def session_lines(count: int = COUNT, secret: str = SECRET) -> bytes:
    """A canonical JSONL session of `count` events holding `secret` in a few of them."""
    out = []
    for i in range(count):
        record: dict[str, Any] = {
            "kind": "tool_call" if i % 2 else "llm_call",
            "timestamp": f"2026-02-08T10:{(i // 60) % 60:02d}:{i % 60:02d}Z",
            "payload": {"i": i, "text": f"event {i}"},
        }
        if i in SECRET_SEQS:
            record["payload"]["prompt"] = f"use the key {secret} please"
        if i == STEP_SEQ:
            record.update(kind="step_end", step_state={"step": 1, "output": f"got {secret}", "success": True})
        if i == CHANGE_SEQ:
            record["state_change"] = {"variables": {"api_key": secret}, "memory": [f"remember {secret}"]}
        out.append(orjson.dumps(record))
    return b"\n".join(out) + b"\n"


def build(path: str) -> None:
    from pathlib import Path

    from django.core.management import call_command

    from sessions_app import comments
    from sessions_app.access import Actor
    from sessions_app.ingest.importing import import_local_file
    from sessions_app.models import Project, Role
    from sessions_app.reviews import sign_off
    from tests.builders_teams import member

    call_command("migrate", verbosity=0)
    project = Project.get_default()
    (outcome,) = import_local_file(path=Path(path), project=project)
    session = outcome.session
    reviewer = Actor(user=member("rita", project, Role.MAINTAINER))
    comments.create_comment(actor=reviewer, session=session, seq=3, body=f"is {SECRET} a real key?")
    sign_off(session=session, reviewer=reviewer, verdict="approved", note="fine")
    print(session.pk)


def redact(session_id: int, secret: str, seq: int) -> None:
    from django.db import connection

    from sessions_app import stored_redaction
    from sessions_app.models import Event, Session
    from sessions_app.replay.sign_offs import sign_offs_of
    from sessions_app.verification import verify_session

    session = Session.objects.get(pk=session_id)
    result = stored_redaction.redact_text(session=session, seq=seq, text=secret, label="apikey", actor="rita")
    purge = stored_redaction.purge_freed()
    after = verify_session(session=session)
    signed = [s.coverage.unchanged for s in sign_offs_of(session=session)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Event._meta.db_table} SET payload = %s WHERE session_id = %s AND seq = %s",
            ['{"i": 1, "text": "edited"}', session.pk, TAMPERED_SEQ],
        )
    tampered = verify_session(session=session, record=False)
    print(orjson.dumps({
        "result": result.to_dict(), "purge": purge.to_dict(), "valid": after.valid, "redactions": after.redactions,
        "redaction_count": after.redaction_count, "sign_offs_unchanged": signed, "tampered_valid": tampered.valid,
        "tampered_seq": tampered.first_broken_seq,
    }).decode())  # fmt: skip


def main(argv: list[str]) -> None:
    import django

    django.setup()
    step, *args = argv
    if step == "build":
        build(args[0])
    elif step == "redact":
        redact(int(args[0]), args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    main(sys.argv[1:])
