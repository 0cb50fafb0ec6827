"""Re-verify a session's hash chain from the stored records.

Each event's hash is sha256(previous hash + the original record's bytes), written by ingest in
seq order (unlike AgentLens, which hashes in arrival order and verifies in time order). The
check reads the records in seq order a chunk at a time (keyset, never OFFSET), so memory stays
flat whatever the session's length.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.utils import timezone

from .models import GENESIS_HASH, Event, Session
from .replay import link_hash

CHUNK = 5000
_TABLE = Event._meta.db_table


def verify_chain(*, session: Session, chunk: int = CHUNK) -> dict[str, Any]:
    """Re-hash every stored record in seq order and store the result on the session.

    `firstBrokenSeq` is the first event whose record no longer hashes to its stored hash, or
    whose link does not point at the previous event's hash, or the first missing seq. After a
    broken event the walk continues from its stored hash, so one edited record is reported
    once and `brokenEvents` counts every such event.
    """
    # Count and head are written in one transaction by ingest: read them together, and check
    # only what existed then (a live session may grow while we read).
    count, head = Session.objects.filter(pk=session.pk).values_list("event_count", "head_hash").get()
    expected_prev = GENESIS_HASH
    next_seq = 0
    first_broken: int | None = None
    broken = 0
    checked = 0
    while next_seq < count:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT seq, raw, hash, prev_hash FROM {_TABLE} WHERE session_id = %s "
                f"AND seq >= %s AND seq < %s ORDER BY seq LIMIT {int(chunk)}",
                [session.pk, next_seq, count],
            )
            rows = cursor.fetchall()
        if not rows:
            break
        for seq, raw, digest, prev in rows:
            ok = seq == next_seq and prev == expected_prev and link_hash(prev, raw) == digest
            if not ok:
                broken += 1
                if first_broken is None:
                    first_broken = next_seq if seq != next_seq else seq
            expected_prev = digest
            next_seq = seq + 1
            checked += 1
    if next_seq < count or expected_prev != head:
        # Events missing at the end, or the head moved without them: the chain ends early.
        broken += 1
        if first_broken is None:
            first_broken = min(next_seq, max(count - 1, 0))

    valid = first_broken is None
    checked_at = timezone.now()
    Session.objects.filter(pk=session.pk).update(
        chain_valid=valid, chain_broken_seq=first_broken, chain_checked_at=checked_at
    )
    session.chain_valid = valid
    session.chain_broken_seq = first_broken
    session.chain_checked_at = checked_at
    return {
        "chainValid": valid,
        "firstBrokenSeq": first_broken,
        "events": checked,
        "brokenEvents": broken,
        "checkedAt": checked_at.isoformat(),
    }
