"""The hash chain: how an event (or an audit entry, or a bundle's event) is hashed and linked.

Pure functions over values, no database: ingest seals rows with them, verification re-derives
them, and a bundle can be checked without a server.

An event's link is

    hash = sha256(prev_hash + "\\n" + orjson([seq, <recorded fields>, <content commitments>]))

- The *recorded* fields are what the source said about the event besides its content: kind,
  source type, time, line, step, ids, tool, cost, tokens, reward, error and outcome flags.
  They are hashed as their stored values, normalised so that both databases give the same
  bytes (`recorded_values`).
- The *content* fields (payload, the original record, step state, state change) are hashed
  through a salted commitment each: `commit(salt_of(event_salt, field), text)`. That is what lets
  a value be removed later (redaction) while the chain still proves everything else: the
  removed value's commitment is kept in its place, and the field salts of the event's other
  content fields are kept instead of the event salt, so the removed value cannot be guessed
  back from its commitment by trying candidates.
- A content value removed after its event was hashed (a bundle's event redacted at import;
  later, a maintainer's redaction) leaves its commitment behind in the event's `redacted`
  column, a JSON object `{"salts": {field: field salt}, "fields": {field: {"commit": hex,
  "labels": [...], "by": who, "at": when}}}`, and the event's salt is emptied: the kept fields'
  commitments are recomputed from their text with their own salts, the removed ones are taken as
  stored (`stored_commitments`, `redact_field`).
- Everything else a page shows (step position, pairing, fail streak, running totals, counts by
  kind, keyframes) is derived from these in seq order, and verification derives it again and
  compares (sessions_app/verification.py).

A session's own fields a page shows (its task, final answer, status, times, ids, model,
metadata: HEADER_FIELDS) change while a live session runs, so they cannot be linked into the
chain's start. Each writer that stores them also stores their *seal* (`Session.header_seal`), a
digest per field (`header_seal`), and verification reports each field whose value no longer
gives its digest (`header_changes`): an edit of the task in the database is found and named. A
writer digests only the fields it sets, so an earlier edit survives its write. Like the event
chain, the seal can be made again by whoever can write the database: a sign-off keeps the seal
it signed (replay/sign_offs.py names the fields changed since).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson

GENESIS_HASH = "0" * 64
SALT_BYTES = 16

# Hashed as their stored values, in this order, after the seq.
RECORDED_FIELDS = (
    "kind", "source_type", "ts", "line", "step", "depth", "agent_id", "parent_id", "child_id",
    "tool", "pair_id", "duration_ms", "cost_usd", "cost_unpriced", "tokens", "reward",
    "cumulative_reward", "is_error", "failed",
)  # fmt: skip
# Hashed through a salted commitment each (None stays None: "no value" is part of the record).
CONTENT_FIELDS = ("payload", "raw", "step_state", "state_change")

_FIELD_TAGS = {name: name.encode("ascii") for name in CONTENT_FIELDS}
_TAGS = tuple(_FIELD_TAGS.values())
_sha256 = hashlib.sha256


def new_salts(count: int) -> list[str]:
    """`count` random event salts (hex), from one call to the system's random source."""
    data = os.urandom(SALT_BYTES * count)
    return [data[i : i + SALT_BYTES].hex() for i in range(0, len(data), SALT_BYTES)]


def salt_of(event_salt: str, field: str) -> bytes:
    """The salt of one content field: one-way from the event's salt, so keeping the other
    fields' salts after a redaction reveals nothing about the removed field's salt."""
    return _sha256(bytes.fromhex(event_salt) + _FIELD_TAGS[field]).digest()


def commit(field_salt: bytes, text: str | None) -> str | None:
    """The commitment to one content value (its stored text)."""
    if text is None:
        return None
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate from a "\\ud800" escape, kept as received
        data = text.encode("utf-8", "surrogatepass")
    return _sha256(field_salt + data).hexdigest()


def commitments(event_salt: str, contents: Sequence[str | None]) -> list[str | None]:
    """The commitments of an event's CONTENT_FIELDS values, in that order: `commit` with each
    field's `salt_of`, spelled out because it runs once per event written and verified."""
    salt = bytes.fromhex(event_salt)
    sha = _sha256
    try:
        return [
            None if text is None else sha(sha(salt + tag).digest() + text.encode()).hexdigest()
            for tag, text in zip(_TAGS, contents)
        ]
    except UnicodeEncodeError:  # a lone surrogate from a "\\ud800" escape, kept as received
        return [commit(salt_of(event_salt, name), text) for name, text in zip(CONTENT_FIELDS, contents)]


def ts_text(value: Any) -> str | None:
    """A stored timestamp as hashed: naive UTC "YYYY-MM-DD HH:MM:SS.ffffff", whichever way the
    database gave it back (SQLite: the stored text; PostgreSQL: an aware datetime)."""
    if value is None:
        return None
    if type(value) is str:
        if len(value) == 26 and value[10] == " ":
            return value  # already the form (what ingest writes on SQLite, nearly always)
    elif isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(" ", timespec="microseconds")
    text = str(value).replace("T", " ").removesuffix("Z")
    if "." not in text:
        return text + ".000000"
    head, fraction = text.split(".", 1)
    return f"{head}.{fraction[:6].ljust(6, '0')}"


def recorded_values(values: Sequence[Any]) -> list[Any]:
    """RECORDED_FIELDS values normalised the same way for both databases (booleans that SQLite
    gives back as 0/1, integers stored in float columns, timestamps). Spelled out rather than
    looped over: it runs once per event written and once per event verified."""
    (
        kind, source_type, ts, line, step, depth, agent_id, parent_id, child_id, tool, pair_id,
        duration_ms, cost_usd, cost_unpriced, tokens, reward, cumulative_reward, is_error, failed,
    ) = values  # fmt: skip
    return [
        kind, source_type, ts_text(ts), line, step, depth, agent_id, parent_id, child_id, tool,
        pair_id, None if duration_ms is None else float(duration_ms),
        None if cost_usd is None else float(cost_usd), bool(cost_unpriced), tokens,
        None if reward is None else float(reward),
        None if cumulative_reward is None else float(cumulative_reward), bool(is_error),
        None if failed is None else bool(failed),
    ]  # fmt: skip


def link_hash(prev_hash: str, seq: int, recorded: list[Any], commits: list[str | None]) -> str:
    """The event's hash: its predecessor's hash and its own hashed form."""
    form = orjson.dumps([seq, *recorded, *commits])
    return _sha256(prev_hash.encode("ascii") + b"\n" + form).hexdigest()


def stored_commitments(event_salt: str, redacted: str | None, contents: Sequence[str | None]) -> list[str | None]:
    """The commitments of an event as stored: `commitments` while nothing was removed from it;
    else the removed fields' commitments as kept in `redacted`, the others from their text."""
    if redacted is None:
        return commitments(event_salt, contents)
    try:
        form = orjson.loads(redacted)
        fields, salts = form["fields"], form["salts"]
        out: list[str | None] = []
        for name, text in zip(CONTENT_FIELDS, contents):
            removed = fields.get(name)
            if removed is not None:
                out.append(str(removed["commit"]))
            elif text is None:
                out.append(None)
            else:
                out.append(commit(bytes.fromhex(salts[name]), text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"redacted: not a record of removed values ({exc!r})") from None
    return out


def redact_field(
    *,
    event_salt: str,
    redacted: str | None,
    contents: Sequence[str | None],
    field: str,
    labels: Sequence[str],
    by: str,
    at: str,
) -> tuple[str, str]:
    """Replace the value of content `field` (`contents` as stored, in CONTENT_FIELDS order) by
    its commitment: the event's new salt ("", the event salt is gone) and `redacted` column.
    The event's link is unchanged: `stored_commitments` gives the same commitments after as
    before. Redacting a field again keeps its first commitment and adds the labels."""
    if redacted is None:
        salt = bytes.fromhex(event_salt)
        form: dict[str, Any] = {
            "salts": {name: _sha256(salt + _FIELD_TAGS[name]).hexdigest() for name in CONTENT_FIELDS},
            "fields": {},
        }
    else:
        form = orjson.loads(redacted)
    fields, salts = form["fields"], form["salts"]
    if field in fields:
        entry = fields[field]
        entry["labels"] = sorted(set(entry["labels"]) | set(labels))
    else:
        text = contents[CONTENT_FIELDS.index(field)]
        fields[field] = {"commit": commit(bytes.fromhex(salts[field]), text), "labels": sorted(set(labels)),
                         "by": by, "at": at}  # fmt: skip
        # The removed field's salt goes with its value: kept, it would let anyone holding a
        # guess of the value confirm it against the commitment.
        del salts[field]
    return "", orjson.dumps(form).decode()


_HEX64 = frozenset("0123456789abcdef")


def parse_redacted(text: Any) -> dict[str, Any]:
    """An event's `redacted` column (see the module docstring) decoded and checked, so that
    verification and bundle checks can use it: a ValueError says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError("not a JSON text")
    try:
        form = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError("not JSON") from None
    if (
        not isinstance(form, dict)
        or not isinstance(form.get("fields"), dict)
        or not isinstance(form.get("salts"), dict)
    ):
        raise ValueError("not an object with 'fields' and 'salts'")
    fields, salts = form["fields"], form["salts"]
    if not fields:
        raise ValueError("no field is redacted")
    for name, entry in fields.items():
        if name not in _FIELD_TAGS:
            raise ValueError(f"fields: {name[:40]!r} is no content field")
        if name in salts:
            raise ValueError(f"fields: {name} keeps its salt")
        if not isinstance(entry, dict) or not _is_hex64(entry.get("commit")):
            raise ValueError(f"fields.{name}: no commitment")
        labels = entry.get("labels")
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ValueError(f"fields.{name}: labels are not a list of texts")
        for key in ("by", "at"):
            if not isinstance(entry.get(key, ""), str):
                raise ValueError(f"fields.{name}.{key}: not a text")
        if "after" in entry and not _is_hex64(entry["after"]):
            raise ValueError(f"fields.{name}.after: not a digest")
    for name, salt in salts.items():
        if name not in _FIELD_TAGS or not _is_hex64(salt):
            raise ValueError(f"salts: {name[:40]!r} is no content field's salt")
    return form


def text_digest(text: str) -> str:
    """The digest a redaction keeps of the text it left in a field (`after`): the text is public
    (pages show it), so a plain SHA-256, which lets an edit of it be found like any other."""
    return _sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def with_text_digests(redacted: str, texts: dict[str, str]) -> str:
    """A `redacted` record with `after` set to `text_digest` of each field's text in `texts`."""
    form = orjson.loads(redacted)
    for name, text in texts.items():
        form["fields"][name]["after"] = text_digest(text)
    return orjson.dumps(form).decode()


def edited_after_redaction(form: dict[str, Any], contents: Sequence[str | None]) -> list[str]:
    """The redacted fields whose text is no longer what their redaction left (`after`)."""
    found = []
    for name, text in zip(CONTENT_FIELDS, contents):
        after = form["fields"].get(name, {}).get("after")
        if after is not None and (text is None or text_digest(text) != after):
            found.append(name)
    return found


def removals(seq: int, form: dict[str, Any]) -> list[dict[str, Any]]:
    """What a `parse_redacted` record says was removed from event `seq`: one entry per field and
    label (seq, field, label, by, at), as verification lists them and a bundle's
    redactions.json holds them."""
    return [
        {"seq": seq, "field": name, "label": label, "by": entry.get("by", ""), "at": entry.get("at", "")}
        for name, entry in sorted(form["fields"].items())
        for label in entry["labels"] or [""]
    ]


def _is_hex64(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX64.issuperset(value)


# A session's own fields that pages show, sealed by every writer that stores them.
HEADER_FIELDS = (
    "project_id", "source_format", "source_session_id", "run_id", "agent_id", "task", "environment",
    "model", "status", "completed", "started_at", "ended_at", "final_answer", "reward", "metadata",
    "bundle_origin", "created_at", "import_job_id", "parent_id",
)  # fmt: skip
# Links the database itself empties (its job deleted, the parent session deleted: the child stands
# alone): empty is their sealed value or that.
_HEADER_LINKS = frozenset({"import_job_id", "parent_id"})


def header_field_name(name: str) -> str:
    """How findings and sign-offs name a header field: a link by its relation (project,
    import_job, parent), any other as itself (source_session_id stays source_session_id)."""
    return name.removesuffix("_id") if name == "project_id" or name in _HEADER_LINKS else name


_HEADER_FLOATS = frozenset({"reward"})
_HEADER_BOOLS = frozenset({"completed"})
_HEADER_JSON = frozenset({"metadata", "bundle_origin"})


def header_seal(values: Mapping[str, Any], *, keep: Mapping[str, str] | None = None) -> str:
    """The seal of a session's HEADER_FIELDS `values` (as a model instance or the database holds
    them): JSON {field: digest of its value}, one digest a field so that verification can name
    the field that changed. `keep`: digests carried over as they were, for the fields this write
    does not set. A writer digests only what it sets: digesting what the row merely holds would
    seal an edit made in the database before it. Plain digests, no salt: the values themselves
    are stored beside them, and a redaction seals the redacted values again."""
    keep = keep or {}
    return orjson.dumps(
        {name: keep[name] if name in keep else header_digest(name, values[name]) for name in HEADER_FIELDS}
    ).decode()


def header_digests(seal: Any) -> dict[str, str]:
    """The digests a stored seal holds, by field ({} when it holds none or cannot be read)."""
    try:
        digests = orjson.loads(seal) if isinstance(seal, str) and seal else None
    except orjson.JSONDecodeError:
        return {}
    return {k: v for k, v in digests.items() if isinstance(v, str)} if isinstance(digests, dict) else {}


def header_changes(seal: Any, values: Mapping[str, Any]) -> list[str]:
    """The HEADER_FIELDS whose value no longer gives the digest `seal` holds for it (every field,
    if the seal is missing or cannot be read). A link the database emptied is no change."""
    digests = header_digests(seal)
    if not digests:
        return list(HEADER_FIELDS)
    return [
        name for name in HEADER_FIELDS
        if digests.get(name) != header_digest(name, values[name])
        and not (name in _HEADER_LINKS and values[name] is None)
    ]  # fmt: skip


def header_digest(name: str, value: Any) -> str:
    """The digest of one header field's value, as both databases give it back."""
    if name in _HEADER_JSON:
        value = _json_form(value)
    elif name in _HEADER_FLOATS:
        # SQLite stores a NaN as NULL; both databases give an integer back as a float.
        value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
    elif name in _HEADER_BOOLS:
        value = bool(value)
    elif isinstance(value, datetime):
        value = ts_text(value)
    text = json.dumps([name, value], ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return _sha256(text.encode("ascii")).hexdigest()[:32]


def _json_form(value: Any) -> Any:
    """A JSON column's value as either database gives it back, its scalars tagged ("s" text,
    "n" number) so that no text can stand for a number: PostgreSQL's jsonb keeps numbers as
    decimals, so 1e+20 comes back as the integer 100000000000000000000 and -0.0 as 0.0, where
    SQLite gives back what was written. An integral number is its decimal digits either way,
    any other its shortest repr."""
    return _tagged(json.loads(json.dumps(value)))  # as a JSON column stores it: string keys, lists


def _tagged(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, int):
        return f"n{value}"
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            return f"n{value!r}"
        return "n0" if value == 0 else f"n{Decimal(repr(value)).to_integral_value():f}"
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    return [_tagged(item) for item in value]
