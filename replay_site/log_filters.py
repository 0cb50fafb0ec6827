"""Filters of the server's console log (settings.LOGGING)."""

from __future__ import annotations

import logging


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
