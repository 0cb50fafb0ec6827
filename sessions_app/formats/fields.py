"""A record's field values, read the way every JSON format here reads them: each unusable value is
a problem on its line and field, and the record itself is kept."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import orjson

from ..canonical import INT64_MAX, INT64_MIN, Kind, Problems

_MISSING = object()


def number(container: dict[str, Any] | Any, key: str, field: str, line: int | None, problems: Problems) -> float | None:
    """A finite number at `container[key]`, or None. Absent is fine; null, text, booleans and
    NaN/Infinity are reported on `field` and ignored."""
    if not isinstance(container, dict):
        return None
    value = container.get(key, _MISSING)
    if value is _MISSING:
        return None
    if value is None:
        problems.add(line, field, "null where a number was expected (ignored)")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.add(line, field, f"not a number: {preview(value)} (ignored)")
        return None
    if not math.isfinite(value):
        problems.add(line, field, f"not a finite number: {value} (ignored)")
        return None
    if not INT64_MIN < value <= INT64_MAX:  # stored in 64-bit columns
        problems.add(line, field, f"a number beyond 64 bits: {value} (ignored)")
        return None
    return value


def amount(container: dict[str, Any] | Any, key: str, field: str, line: int | None, problems: Problems) -> float | None:
    """A number as `number` reads it that cannot be below 0 (a cost, a token count, a
    duration): a negative one is reported on `field` and ignored, not subtracted from the
    session's totals."""
    value = number(container, key, field, line, problems)
    if value is not None and value < 0:
        problems.add(line, field, f"a negative amount: {value} (ignored)")
        return None
    return value


def text(value: Any) -> str:
    """A value shown as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


def record_kind(
    record: dict[str, Any], key: str, kinds: dict[str, str], line: int | None, problems: Problems
) -> tuple[str, str]:
    """The record's type at `record[key]` and its canonical kind in `kinds`. A missing type
    ("" then) or an unknown one is reported, and the record kept as a custom event."""
    name = record.get(key)
    if not isinstance(name, str) or not name:
        problems.add(line, key, f"missing {key}: kept as a custom event")
        return "", Kind.CUSTOM
    kind = kinds.get(name)
    if kind is None:
        problems.add(line, key, f"unknown {key} {name!r}: kept as a custom event")
        return name, Kind.CUSTOM
    return name, kind


def payload_object(value: Any, line: int | None, problems: Problems) -> dict[str, Any]:
    """A record's `payload` as an object: null is taken as empty and any other value that is no
    object is kept under "value", both reported."""
    if value is None:
        problems.add(line, "payload", "null payload (taken as empty)")
        return {}
    if not isinstance(value, dict):
        problems.add(line, "payload", f"payload is {json_kind(value)}, not an object")
        return {"value": value}
    return value


# JSON text decoded to be read (shown, or searched for messages) holds at most this many
# objects and arrays: decoded, each costs some hundred bytes, so 990,000 characters of "[]," made
# 18 MB and forty of them nearly a gigabyte for one page. Text costs no more
# decoded than as it is, and is never what makes a value pass this.
DECODED_CONTAINERS_LIMIT = 20_000


def too_many_containers(json_text: str) -> bool:
    """Whether decoding the JSON text would make more than DECODED_CONTAINERS_LIMIT objects and
    arrays (a bound from above: brackets inside strings are counted too; two C-speed counts)."""
    return json_text.count("{") + json_text.count("[") > DECODED_CONTAINERS_LIMIT


def clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit] + f"… [{len(value) - limit} more characters]"


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words for a message ("got a list", "is null, not an
    object"): never Python's type names (NoneType, dict, str)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def preview(value: Any) -> str:
    return clip(text(value), 60)


def parse_iso(value: Any, field: str, line: int | None, problems: Problems) -> datetime | None:
    """An ISO 8601 timestamp (a trailing Z allowed; naive means UTC), or None with a problem."""
    if value is None or value == "":
        problems.add(line, field, "missing timestamp")
        return None
    if not isinstance(value, str):
        problems.add(line, field, f"not an ISO 8601 timestamp: {preview(value)}")
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        problems.add(line, field, f"not an ISO 8601 timestamp: {preview(value)}")
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    if not in_utc_range(parsed):
        problems.add(line, field, f"timestamp outside the years 1-9999 in UTC: {preview(value)}")
        return None
    return parsed


def in_utc_range(moment: datetime) -> bool:
    """Whether an aware datetime exists in UTC ("0001-01-01T00:00+14:00" does not): it is
    stored and compared in UTC."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return False
    return True


def iso_text(value: Any) -> Any:
    """A schema's validator (mode "before") of a time given as text: numbers, booleans and the
    rest are refused as the schema says (pydantic would take a number for epoch seconds, or
    milliseconds, guessing which): ISO 8601 text or null."""
    if value is not None and not isinstance(value, (str, datetime)):
        raise ValueError(f"expected ISO 8601 text, got {json_kind(value)}")
    return value


def utc_instant(value: datetime | None) -> datetime | None:
    """A schema's validator of a time that is stored in UTC: the value, or ValueError when it
    has no UTC instant."""
    if value is not None and value.tzinfo is not None and not in_utc_range(value):
        raise ValueError("timestamp outside the years 1-9999 in UTC")
    return value


def parse_epoch_ms(value: Any, field: str, line: int | None, problems: Problems) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime, or None with a problem."""
    if value is None:
        problems.add(line, field, "null where epoch milliseconds were expected")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        problems.add(line, field, f"not epoch milliseconds: {preview(value)}")
        return None
    try:
        return datetime.fromtimestamp(value / 1000.0, tz=UTC)
    except (OverflowError, OSError, ValueError):
        problems.add(line, field, f"epoch milliseconds out of range: {value}")
        return None
