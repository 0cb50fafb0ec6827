"""Filters of the server's console log (settings.LOGGING)."""

from __future__ import annotations

import logging
import re


class NoTracebackForClientErrors(logging.Filter):
    """Django logs a refused request (403 PermissionDenied, 400 SuspiciousOperation) with the
    traceback of the exception that refused it: an operator reading the console would take a
    routine refusal for a crash. Such a record keeps its one line; a server error keeps its
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True


# A share link's path (sessions_app/urls.py, "open_share_link"): its token is a secret, stored
# hashed (sharing.py), which Django's request log would write out whole on every refusal.
# Everything after "/s/" up to the end of the path as a log line quotes it (runserver's ends at
# its quote): a token may follow doubled slashes, a space, "./" or a backslash, in either case,
# and each reaches a refusal and its log line.
_SHARE_PATH = re.compile(r'(?i)[/\\]s[/\\][^"?#\n]*')


class NoShareTokens(logging.Filter):
    """Django logs a refused request with its path ("Not Found: /s/<token>"): a mistyped, revoked
    or expired link's token would sit in the server's log in plain text, where whoever reads the
    log could try it (a revoked one may be one that was reopened). The path keeps its shape
    with the token left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_masked(arg) for arg in record.args)
        record.msg = _masked(record.msg)
        return True


def _masked(value: object) -> object:
    return _SHARE_PATH.sub("/s/[token]", value) if isinstance(value, str) else value
