"""Characters that hide, or turn, what a reader sees: refused in names people pick one another's
things by (a project's, an API key's, a tour's or a checkpoint's name), and in the file names an
evidence bundle carries.

A project named "Acme" plus a zero-width space, or with a right-to-left override, reads in every
list as another project; a bundle member named with a fullwidth slash is written by some unzip
tools as a folder. Pure functions (bundle_reader.py, which needs no database, uses them).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import cache

# Format characters a name needs: the zero-width joiner and non-joiner (Persian and Indic names,
# emoji sequences are written with them). Every other format character (direction marks,
# embeddings, overrides and isolates, zero-width spaces, the soft hyphen, invisible operators,
# tag characters ...) is refused, with line and paragraph separators, control characters and the
# blank "letters" (Hangul fillers, the blank Braille pattern).
_NEEDED_FORMAT = frozenset("\u200c\u200d")
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Marks Unicode ignores by default (they show nothing): the combining grapheme joiner, Khmer's
# inherent vowels, Mongolian variation selectors, the variation selectors (and their supplement).
_IGNORED_MARKS = frozenset(
    "\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
# In a file name: what a file system or an unzip tool may read as a folder or a stream.
_PATH_LIKE = frozenset(":\uff0f\uff3c\u2215\u2044\u29f8\uff0e")
MAX_FILE_NAME_BYTES = 255  # a file name's limit on the common file systems


def _hides(ch: str) -> bool:
    category = unicodedata.category(ch)
    if category == "Cf":
        return ch not in _NEEDED_FORMAT
    if category == "Zs":  # a space other than the space: "a b" with a no-break space reads as "a b"
        return ch != " "
    return category in ("Cc", "Zl", "Zp") or ch in _BLANK_LETTERS or ch in _IGNORED_MARKS


def hiding_characters(text: str) -> str:
    """The code points of `text` that hide or turn what a reader sees, as "U+XXXX, ..." (sorted),
    or "" when there is none. A joiner (ZWJ, ZWNJ) joins two letters: at either end it joins
    nothing, and hides."""
    found = {ch for ch in text if _hides(ch)}
    found.update(ch for ch in (text[:1], text[-1:]) if ch in _NEEDED_FORMAT)
    return ", ".join(f"U+{ord(ch):04X}" for ch in sorted(found))


def without_hidden(text: str) -> str:
    """`text` as a reader sees it: the characters that show nothing (a soft hyphen, a zero-width
    space, a byte order mark ...) left out, so "INC-47" + U+00AD + "11" is "INC-4711"."""
    return "".join(ch for ch in text if not _hides(ch) or ch in "\n\t ")


def shown_plainly(text: str) -> str:
    """`text` with each character that hides or turns what a reader sees (a terminal's escape
    sequences among them) written as its code point, `\\u001b`: for printing text that came
    from elsewhere where nothing escapes it (verify_bundle prints a bundle's manifest)."""
    return "".join(f"\\u{ord(ch):04x}" if _hides(ch) else ch for ch in text)


# The embeddings, overrides and isolates: each turns the direction of the text after it, so that
# "need work \u202eevorppa" reads "need work approve". Prose needs none of them (a right-to-left
# script is shown right to left by its letters; the marks U+200E/U+200F stay).
_DIRECTION_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")


def directions_written_out(text: str) -> str:
    """What people write as prose (a comment, a tour's narration, a sign-off's note) with each
    direction control written as its code point, `\\u202e`: as names are (`shown_plainly`), but
    line breaks, tabs and every other character kept, as prose needs them."""
    return _DIRECTION_CONTROLS.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def as_picked(name: str) -> str:
    """A name people pick, in the one spelling of what it shows (NFC): "é" as one character or
    as "e" and its accent is one name, so a second "Café" is the first's duplicate, not a twin
    only the bytes tell apart."""
    return unicodedata.normalize("NFC", name)


def hidden_in_name(field: str, name: str) -> str:
    """Why `name` is refused as a name (a refusal naming `field`), or "" when it is not: two names
    told apart only by an invisible character, or turned by a direction override, or by a
    letter of another script that looks the same ("Аcme" with a Cyrillic "А"), read as one
    another in every list and in a "Revoke the key …?" prompt."""
    hidden = hiding_characters(name)
    if hidden:
        return f"{field}: no invisible or direction-changing characters ({hidden}): a list would show another name"
    mixed = _mixed_script_word(name)
    if mixed:
        word, scripts = mixed
        return (
            f"{field}: {word!r} mixes {' and '.join(scripts)} letters, which look alike: a list would show "
            "another name; write each word in one script"
        )
    return ""


@cache
def _prototypes() -> dict[str, str]:
    """Each character Unicode's confusables (TR39) map to a prototype, with that prototype
    ("а" → "a", "Ｍ" → "M"): the data lists a prototype with its lookalikes, and a
    lookalike with its one prototype. Loaded once, when first asked (about 1 MB of JSON)."""
    from confusable_homoglyphs.confusables import confusables_data

    prototypes = {}
    for char, glyphs in confusables_data.items():
        if len(glyphs) == 1 and char in {g["c"] for g in confusables_data.get(glyphs[0]["c"], ())}:
            prototypes[char] = glyphs[0]["c"]
    # An ASCII character the data draws as two ("m" as "rn", '"' as "''") is read apart from
    # them in a list, and words differ by them ("Modern" and "Modem", "burn" and "bum" are two
    # names): it is its own prototype, and the lookalikes the data gives the pair are its.
    pairs = {proto: char for char, proto in prototypes.items() if char.isascii() and proto.isascii() and len(proto) > 1}
    return {char: pairs.get(proto, proto) for char, proto in prototypes.items() if char not in pairs.values()}


def skeleton(name: str) -> str:
    """What `name` looks like (TR39's skeleton): each character as the prototype of its
    lookalikes, so "ACME", "АСМЕ" (Cyrillic) and "ＡＣＭＥ" have one skeleton, and "Acme" another.
    Compatibility forms are taken apart first (NFKD): the confusables data lists no lowercase
    fullwidth letter, so "ｄｅｐｌｏｙ" would otherwise pass for a name of its own beside "deploy"."""
    prototypes = _prototypes()
    decomposed = unicodedata.normalize("NFKD", name)
    return unicodedata.normalize("NFD", "".join(prototypes.get(ch, ch) for ch in decomposed))


def twin_in(name: str, others: Iterable[str]) -> str | None:
    """The first of `others` that is not `name` but looks like it (the same skeleton), or None:
    a second project or checkpoint named so would read, in every list, as the first."""
    looks = skeleton(name)
    return next((other for other in others if other != name and skeleton(other) == looks), None)


# Scripts whose letters are drawn alike ("a", "а", "ɑ"; "A", "Α", "А", "Ａ"): a word of one name may
# hold letters of one of them only. Others (CJK, Arabic, Devanagari ...) mix with Latin freely.
_LOOKALIKE_SCRIPTS = {"LATIN": "Latin", "CYRILLIC": "Cyrillic", "GREEK": "Greek", "FULLWIDTH": "fullwidth"}


def _mixed_script_word(name: str) -> tuple[str, list[str]] | None:
    """The first word (a run of letters and marks) holding letters of two lookalike scripts,
    with those scripts, or None."""
    word: list[str] = []
    scripts: dict[str, None] = {}
    for ch in name + " ":
        if unicodedata.category(ch)[0] in "LM":
            word.append(ch)
            script = _LOOKALIKE_SCRIPTS.get(unicodedata.name(ch, "").split(" ")[0])
            if script:
                scripts[script] = None
            continue
        if len(scripts) > 1:
            return "".join(word), list(scripts)
        word, scripts = [], {}
    return None


def safe_file_name(name: str) -> str:
    """`name` as a file name any tool writes where it says: hiding and path-like characters
    replaced by "_", cut to MAX_FILE_NAME_BYTES, never "", "." or ".."."""
    cleaned = "".join("_" if _hides(ch) or ch in _PATH_LIKE or ch in "/\\" else ch for ch in name)
    # Cut in bytes, a character cut in two dropped whole.
    cleaned = cleaned.encode()[:MAX_FILE_NAME_BYTES].decode("utf-8", "ignore")
    return cleaned if cleaned.strip(". ") else "original"
