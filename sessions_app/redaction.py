"""Redaction: secrets and personal data that a project's rules find become `[REDACTED:<label>]`
before anything is stored (docs/redaction.md).

Pure: no database, no Django. The ingest writer gets a project's `Redactor` (compiled once per
set of rules and cached, `Redactor.from_rules`) and runs it over each event's content (payload,
source record, step state, state change) and the session's own texts while it builds the rows.

How it stays cheap (bench/redaction_bench.py: every detector on costs a few per cent of an
import):
- *one scan of each value*: the strings of a JSON value (keys too) are joined by newlines and
  searched once by an RE2 `Set` that holds a *screen* of every enabled detector and every custom
  rule. RE2 runs in linear time whatever the count of patterns, and answers which of them
  matched. A screen is a looser form of its detector (no boundaries, no validation), so a value
  it passes holds nothing to redact; nearly every value is done here;
- only a value the scan stops is walked, string by string, with the exact patterns of just the
  rules that matched: the built-in detectors in Python's `re` (they need lookbehind for their
  boundaries, and each starts at a boundary so a long run of letters or digits is tried once),
  their validators (Luhn, IBAN mod 97, digit counts, IPv6 parsing) on each candidate only;
  custom rules in RE2, so no rule can backtrack catastrophically on a hostile text.

Custom rules are RE2 regular expressions (Python's syntax without lookaround or backreferences),
at most MAX_PATTERN characters, without named groups, never matching the empty string:
`check_custom_rule` says which of these a rule breaks.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import IO, Any

import orjson
import re2

__all__ = [
    "DETECTORS", "DETECTOR_GROUPS", "MAX_CUSTOM_RULES", "MAX_PATTERN", "Detector", "Redactor", "RuleError",
    "check_custom_rule", "check_label", "placeholder",
]  # fmt: skip

MAX_PATTERN = 500
MAX_CUSTOM_RULES = 50
_LABEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused custom rule is the caller's 422, not a line on stderr
# A rule's compiled program may take this much memory (RE2 refuses larger ones: "pattern too
# large"), so one rule cannot make the scan of every import slow or large.
_RE2_OPTIONS.max_mem = 8 << 20


def placeholder(label: str) -> str:
    """What a redacted value becomes."""
    return f"[REDACTED:{label}]"


# --------------------------------------------------------------------------------------------
# Validators: given a candidate, how much of it (from its start) to redact; 0 leaves it.


def _luhn(text: str) -> int:
    digits = [ord(c) - 48 for c in text if "0" <= c <= "9"]
    if not 13 <= len(digits) <= 19:
        return 0
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return len(text) if total % 10 == 0 else 0


# IBAN lengths by country (the ISO 13616 registry).
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def _iban(text: str) -> int:
    """The longest start of the candidate that is an IBAN of its country's length with the
    mod-97 check (the candidate may run on into the next word: "… 0130 00 ABCD")."""
    length = _IBAN_LENGTHS.get(text[:2])
    if length is None:
        return 0
    taken = 0
    for end, char in enumerate(text, 1):
        if char != " ":
            taken += 1
            if taken == length:
                compact = text[:end].replace(" ", "")
                moved = compact[4:] + compact[:4]
                return end if int("".join(str(int(c, 36)) for c in moved)) % 97 == 1 else 0
    return 0


def _phone(text: str) -> int:
    return len(text) if 8 <= sum("0" <= c <= "9" for c in text) <= 15 else 0


def _ipv6(text: str) -> int:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return 0
    return len(text)


# --------------------------------------------------------------------------------------------
# The built-in detectors


@dataclass(frozen=True)
class Detector:
    name: str  # also its label: [REDACTED:<name>]
    title: str
    group: str  # how the dashboard groups them (DETECTOR_GROUPS)
    pattern: str  # Python `re`, exact (boundaries as lookarounds)
    screen: str  # RE2, a superset of `pattern`'s matches (module docstring)
    example: str  # a value it redacts (tests/test_redaction.py imports each one)
    validator: Callable[[str], int] | None = None


_NOT_KEY = r"(?<![A-Za-z0-9_-])"
_KEY_END = r"(?![A-Za-z0-9_-])"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX = "[0-9A-Fa-f]{1,4}"
_IPV6 = rf"(?:(?:{_HEX}:){{7}}{_HEX}|(?:{_HEX}(?::{_HEX}){{0,6}})?::(?:{_HEX}(?::{_HEX}){{0,6}})?)"
_PHONE = r"(?:\+[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,4}+\)?){2,6}+|\(?[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4})"

DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        # Secrets, by the prefixes their providers document. Anthropic's before OpenAI's: both
        # start with "sk-", and of two detectors matching at one place the first wins.
        Detector(
            "anthropic_key",
            "Anthropic API keys (sk-ant-…)",
            "secrets",
            _NOT_KEY + r"sk-ant-[A-Za-z0-9_-]{20,}+" + _KEY_END,
            r"sk-ant-[A-Za-z0-9_-]{20}",
            "sk-ant-api03-Zx8vQ2mN7pL4kR9tY6wE3uI1oP5aS0dF2gH8jK4lZ7xC-vB9nM3qW6eR1tY4uI8oP2aS5dF7gH0jK3l",
        ),
        Detector(
            "openai_key",
            "OpenAI API keys (sk-, sk-proj-, sk-svcacct-, sk-admin-)",
            "secrets",
            _NOT_KEY + r"sk-(?!ant-)[A-Za-z0-9_-]{20,}+" + _KEY_END,
            r"sk-[A-Za-z0-9_-]{20}",
            "sk-proj-4fR9tY2uI8oP1aS6dF3gH7jK0lZ5xC9vB4nM2qW8eRt_Y1uI6oP3aS7dF0gH5jK-2lZ8xC",
        ),
        Detector(
            "aws_access_key",
            "AWS access key ids (AKIA…, ASIA…)",
            "secrets",
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
            r"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}",
            "AKIAQ3EGRT7YXMPL4Z2W",
        ),
        Detector(
            "github_token",
            "GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_)",
            "secrets",
            _NOT_KEY + r"(?:gh[pousr]_[A-Za-z0-9]{36,}+|github_pat_[A-Za-z0-9_]{22,}+)" + _KEY_END,
            r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{22}",
            "ghp_R4nD0mT0k3nV4lu3F0rT3st1ngPurp0s3sAB",
        ),
        Detector(
            "slack_token",
            "Slack tokens (xoxb-, xoxp-, xapp-, …) and webhook URLs",
            "secrets",
            _NOT_KEY + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}+|xapp-[0-9]-[A-Za-z0-9-]{10,}+"
            r"|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{10,}+)" + _KEY_END,
            r"xox[abposre]-[A-Za-z0-9-]{10}|xapp-[0-9]-[A-Za-z0-9-]{10}|https://hooks\.slack\.com/services/",
            "xoxb-2048123456-4096123456789-Qm9vYmFyQmF6UXV4UXV1eA",
        ),
        Detector(
            "google_api_key",
            "Google API keys (AIza…)",
            "secrets",
            _NOT_KEY + r"AIza[0-9A-Za-z_-]{35}" + _KEY_END,
            r"AIza[0-9A-Za-z_-]{35}",
            "AIzaSyB7rT4uI9oP2aS5dF8gH1jK6lZ3xC0vB7n",
        ),
        Detector(
            "stripe_key",
            "Stripe secret and restricted keys (sk_live_, rk_live_, sk_test_, whsec_)",
            "secrets",
            _NOT_KEY + r"(?:(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}+|whsec_[0-9A-Za-z]{24,}+)" + _KEY_END,
            r"[sr]k_(?:live|test)_[0-9A-Za-z]{16}|whsec_[0-9A-Za-z]{24}",
            "sk_live_51Qw7eRt9yUi2oPa4sDf6gHj8kLz1xCv3bNm5",
        ),
        Detector(
            "jwt",
            "JSON Web Tokens (eyJ….eyJ….…)",
            "secrets",
            _NOT_KEY + r"eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+" + _KEY_END,
            r"eyJ[A-Za-z0-9_-]{5,}\.eyJ",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFkYSJ9."
            "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        ),
        Detector(
            "private_key",
            "Private key blocks (-----BEGIN … PRIVATE KEY-----)",
            "secrets",
            # The block up to its END line; of a block cut short, the header and the base64 after it.
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[A-Za-z0-9+/=\s:,.-]{0,16384}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"|[A-Za-z0-9+/=\s]*+)",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
            "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----",
        ),
        # Personal data.
        Detector(
            "email",
            "Email addresses",
            "personal",
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}+@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}"
            r"(?![A-Za-z0-9-])",
            r"[A-Za-z0-9._%+-]@[A-Za-z0-9-]+\.",
            "ada.lovelace@example.org",
        ),
        Detector(
            "phone",
            "Phone numbers (international +…, and North American (555) 123-4567)",
            "personal",
            r"(?<![A-Za-z0-9+])" + _PHONE + r"(?![0-9])",
            r"\+[1-9][0-9]{0,2}(?:[ .-]?\(?[0-9]{1,4}\)?){2,6}|[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4}",
            "+44 20 7946 0958",
            _phone,
        ),
        Detector(
            # Starting 2-6, the card networks' issuer ranges: other 13-19 digit numbers
            # (milliseconds since 1970 start with 1) are no cards even when Luhn happens to pass;
            # not the digits after a decimal point (2.4000000000000004).
            "card_number",
            "Payment card numbers (13-19 digits passing the Luhn check)",
            "personal",
            r"(?<![0-9+])(?<![0-9]\.)[2-6](?:[ -]?[0-9]){12,18}+(?![0-9])",
            r"(?:^|[^0-9+.]|[^0-9]\.)[2-6](?:[ -]?[0-9]){12,18}",
            "4111 1111 1111 1111",
            _luhn,
        ),
        Detector(
            "iban",
            "IBANs (checked with mod 97)",
            "personal",
            r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}+",
            r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11}",
            "DE89 3704 0044 0532 0130 00",
            _iban,
        ),
        # Network.
        Detector(
            "ipv4",
            "IPv4 addresses",
            "network",
            rf"(?<![0-9.]){_OCTET}(?:\.{_OCTET}){{3}}(?!\.?[0-9])",
            rf"{_OCTET}(?:\.{_OCTET}){{3}}",
            "203.0.113.42",
        ),
        Detector(
            "ipv6",
            "IPv6 addresses",
            "network",
            rf"(?<![0-9A-Za-z:.]){_IPV6}(?![0-9A-Za-z:])",
            rf"(?:{_HEX}:){{7}}{_HEX}|::",
            "2001:db8:85a3::8a2e:370:7334",
            _ipv6,
        ),
    )
}
DETECTOR_GROUPS = {"secrets": "Secrets", "personal": "Personal data", "network": "Network addresses"}


class RuleError(ValueError):
    """A rule that cannot be used; `field` names it (e.g. `custom[2].pattern`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_label(label: Any, field: str) -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise RuleError(
            field,
            "a label is 1 to 40 characters (lowercase letters, digits, '_', '.', '-'), starting with a letter or digit",
        )
    return label


def check_custom_rule(pattern: Any, field: str) -> None:
    """Raise RuleError naming the rule when it cannot be used: empty, longer than MAX_PATTERN,
    not an RE2 expression (its message says why: lookaround, backreferences, a repetition over
    1000, a program too large), with named groups (rules share one pattern), or matching the
    empty string (it would redact between every two characters)."""
    if not isinstance(pattern, str) or not pattern:
        raise RuleError(field, "a pattern is required")
    if len(pattern) > MAX_PATTERN:
        raise RuleError(field, f"a pattern is at most {MAX_PATTERN} characters")
    try:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise RuleError(field, f"not a valid RE2 regular expression: {why}") from None
    if compiled.groupindex:
        raise RuleError(field, "named groups are not supported")
    if compiled.search("") is not None or any(m.group() == "" for m in compiled.finditer("aA0 _-.\n")):
        raise RuleError(field, "the pattern matches the empty string")


# --------------------------------------------------------------------------------------------
# The redactor


class LineTooLong(ValueError):
    """A line of a file too long to redact within bounded memory."""

    def __init__(self, number: int, limit: int) -> None:
        super().__init__(f"line {number} is over {limit:,} bytes (REPLAY_MAX_RECORD_BYTES), too long to redact")
        self.number = number


class Redactor:
    """A project's rules, compiled: the scan (an RE2 Set of every rule's screen) and the exact
    patterns, plus `counts`, the redactions made so far by label.

    Get one with `Redactor.from_rules`: compiled once per set of rules (cached), with counts of
    its own for the import or batch it serves."""

    def __init__(self, detectors: tuple[str, ...], custom: tuple[tuple[str, str], ...], keep_originals: bool) -> None:
        self.detectors = detectors
        self.custom = custom
        # Whether an upload's file (and each event's source record) is kept, redacted too;
        # when not, neither is stored at all.
        self.keep_originals = keep_originals
        scan = re2.Set.SearchSet(_RE2_OPTIONS)
        for name in detectors:
            scan.Add("(?m)" + DETECTORS[name].screen)
        for _label, pattern in custom:
            # Multi-line: the scan's text is the value's strings joined by newlines, and a
            # rule's ^ and $ hold at each string's ends.
            scan.Add("(?m)" + pattern)
        scan.Compile()
        self._scan = scan
        self.counts: Counter[str] = Counter()

    @classmethod
    def from_rules(
        cls, detectors: Iterable[str], custom: Iterable[tuple[str, str]] = (), *, keep_originals: bool = False
    ) -> Redactor | None:
        """The redactor of these rules (unknown detector names are ignored), or None when no rule
        is on: nothing is redacted and originals are kept as they always were."""
        wanted = set(detectors)
        names = tuple(name for name in DETECTORS if name in wanted)  # the documented order
        rules = tuple((label, pattern) for label, pattern in custom)
        if not names and not rules:
            return None
        compiled = _compiled(names, rules, keep_originals)
        fresh = object.__new__(cls)
        fresh.__dict__.update(compiled.__dict__)
        fresh.counts = Counter()
        return fresh

    # Values --------------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """A plain text with every match replaced."""
        fired = self._scan.Match(text)
        if not fired:
            return text
        return self._exact(tuple(fired))(text)

    def value(self, value: Any) -> Any:
        """A JSON value with every string in it (keys too) redacted: the same object when
        nothing matched (the common case, decided by one scan), else a redacted copy."""
        strings: list[str] = []
        _collect(value, strings)
        if not strings:
            return value
        fired = self._scan.Match(strings[0] if len(strings) == 1 else "\n".join(strings))
        if not fired:
            return value
        return _walk(value, self._exact(tuple(fired)))

    @property
    def scans_json(self) -> bool:
        """Whether `scan` can be given JSON text as stored, several joined by newlines: true
        without custom rules. JSON text holds each string verbatim but for the characters it
        escapes (quotes, backslashes, control characters), and no built-in screen spans one of
        those or needs what comes before its match, so a text the screens pass has nothing to
        redact. A custom rule may match across them, or anchor at a string's start: with
        custom rules each value's strings are gathered instead."""
        return not self.custom

    def scan(self, text: str) -> bool:
        """Whether any rule may match in `text` (one pass; see `scans_json` for JSON texts)."""
        return bool(self._scan.Match(text))

    def json_text(self, text: str) -> str:
        """A stored JSON text (payload, step state, state change) redacted: `text` itself when
        nothing matched, else decoded, walked and written again."""
        if self.scans_json and not self._scan.Match(text):
            return text
        value = orjson.loads(text)
        redacted = self.value(value)
        return text if redacted is value else orjson.dumps(redacted, option=orjson.OPT_NON_STR_KEYS).decode()

    def content_text(self, field: str, text: str) -> str:
        """An event's stored content field (chain.CONTENT_FIELDS) redacted: the source record
        ("raw") as record_text, the JSON columns as json_text."""
        return self.record_text(text) if field == "raw" else self.json_text(text)

    def record_text(self, text: str) -> str:
        """A source record's text (an event's raw column): a JSON document is decoded, so only
        its strings change and it stays valid JSON; any other text is redacted as text."""
        if self.scans_json and not self._scan.Match(text):
            return text
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return self.text(text)
        if type(value) is str:
            return self.text(text)
        redacted = self.value(value)
        return text if redacted is value else orjson.dumps(redacted, option=orjson.OPT_NON_STR_KEYS).decode()

    def lines(self, source: IO[bytes], *, max_line: int) -> Iterator[bytes]:
        """A file (an upload's original) redacted line by line, each line as it was unless it
        held something: a JSON line is decoded and written again; in any other line (a line of
        a pretty-printed document) each JSON string literal is decoded, redacted and written
        again, and a line without literals is redacted as text. A line over `max_line` bytes
        (the import's REPLAY_MAX_RECORD_BYTES) raises LineTooLong, read no further: decoding it
        whole took several times its size (a 477 MiB line, 2 GiB)."""
        number = 0
        while raw_line := source.readline(max_line + 2):  # room for its "\r\n"
            number += 1
            body = raw_line.rstrip(b"\r\n")
            if len(body) > max_line:
                raise LineTooLong(number, max_line)
            end = raw_line[len(body) :]
            text = body.decode("utf-8", "surrogateescape")
            if not self._scan.Match(text):
                yield raw_line
                continue
            try:
                value = orjson.loads(body)
            except orjson.JSONDecodeError:
                redacted_text = self._literals(text)
            else:
                redacted = self.value(value)
                redacted_text = text if redacted is value else orjson.dumps(redacted).decode()
            yield redacted_text.encode("utf-8", "surrogateescape") + end

    def _literals(self, text: str) -> str:
        literals = list(_STRING_LITERAL.finditer(text))
        if not literals:
            return self.text(text)
        out: list[str] = []
        last = 0
        for match in literals:
            literal = match.group()
            try:
                decoded = orjson.loads(literal)
            except orjson.JSONDecodeError:
                continue
            redacted = self.text(decoded)
            if redacted is not decoded and redacted != decoded:
                out.append(text[last : match.start()])
                out.append(orjson.dumps(redacted).decode())
                last = match.end()
        out.append(text[last:])
        return "".join(out)

    # The exact pass ------------------------------------------------------------------------

    def _exact(self, fired: tuple[int, ...]) -> Callable[[str], str]:
        """The function that redacts one string with the exact patterns of the rules the scan
        found (indexes into detectors, then custom rules)."""
        builtin = _builtin_pattern(tuple(self.detectors[i] for i in fired if i < len(self.detectors)))
        custom = _custom_pattern(tuple(self.custom[i - len(self.detectors)] for i in fired if i >= len(self.detectors)))
        counts = self.counts

        def replace_builtin(match: re.Match[str]) -> str:
            found = match.group()
            detector = DETECTORS[match.lastgroup]
            if detector.validator is None:
                counts[detector.name] += 1
                return f"[REDACTED:{detector.name}]"
            length = detector.validator(found)
            if not length:
                return found
            counts[detector.name] += 1
            return f"[REDACTED:{detector.name}]" + found[length:]

        def replace_custom(match: Any) -> str:
            label = custom[1][int(match.lastgroup[1:])]
            counts[label] += 1
            return f"[REDACTED:{label}]"

        def redact(text: str) -> str:
            if builtin is not None and builtin.search(text) is not None:
                text = builtin.sub(replace_builtin, text)
            if custom is not None and custom[0].search(text) is not None:
                text = custom[0].sub(replace_custom, text)
            return text

        return redact


@lru_cache(maxsize=64)
def _compiled(detectors: tuple[str, ...], custom: tuple[tuple[str, str], ...], keep_originals: bool) -> Redactor:
    return Redactor(detectors, custom, keep_originals)


@lru_cache(maxsize=256)
def _builtin_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    if not names:
        return None
    return re.compile("|".join(f"(?P<{name}>{DETECTORS[name].pattern})" for name in names))


@lru_cache(maxsize=256)
def _custom_pattern(rules: tuple[tuple[str, str], ...]) -> tuple[Any, list[str]] | None:
    if not rules:
        return None
    pattern = "|".join(f"(?P<c{i}>{rule})" for i, (_label, rule) in enumerate(rules))
    return re2.compile(pattern, _RE2_OPTIONS), [label for label, _rule in rules]


# A JSON string literal within a line of text (a pretty-printed document's line).
_STRING_LITERAL = re.compile(r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"')


# A JSON number this long may be a card number written as a number (13-19 digits).
_LONG_NUMBER = 10**12


def _collect(value: Any, out: list[str]) -> None:
    """Every string of a JSON value, keys included, in order (and every long integer's digits)."""
    kind = type(value)
    if kind is str:
        out.append(value)
    elif kind is dict:
        for key, item in value.items():
            if type(key) is str:
                out.append(key)
            item_kind = type(item)
            if item_kind is str:
                out.append(item)
            elif item_kind is dict or item_kind is list or item_kind is tuple:
                _collect(item, out)
            elif item_kind is int and abs(item) >= _LONG_NUMBER:
                out.append(str(item))
    elif kind is list or kind is tuple:
        for item in value:
            item_kind = type(item)
            if item_kind is str:
                out.append(item)
            elif item_kind is dict or item_kind is list or item_kind is tuple:
                _collect(item, out)
            elif item_kind is int and abs(item) >= _LONG_NUMBER:
                out.append(str(item))
    elif kind is int and abs(value) >= _LONG_NUMBER:
        out.append(str(value))


def _walk(value: Any, redact: Callable[[str], str]) -> Any:
    """A copy of a JSON value with `redact` applied to every string, keys included; a long
    integer that a rule matches becomes the placeholder's string."""
    kind = type(value)
    if kind is str:
        return redact(value)
    if kind is int and abs(value) >= _LONG_NUMBER:
        digits = str(value)
        redacted = redact(digits)
        return value if redacted == digits else redacted
    if kind is dict:
        return {(redact(key) if type(key) is str else key): _walk(item, redact) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_walk(item, redact) for item in value]
    return value
