"""A project's redaction rules: which built-in detectors are on, its own patterns, and whether
uploaded originals are kept once redacted (docs/redaction.md). The ingest writer applies them to
everything it stores (sessions_app/ingest/writer.py); sessions_app/redaction.py compiles them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import models
from django.utils import timezone

from ..redaction import Redactor
from .projects import Project

# Projects whose rules were read once for a whole pass (`RedactionRules.pinned`), and what they gave.
_pinned: ContextVar[dict[int, Redactor | None] | None] = ContextVar("pinned_redaction_rules", default=None)


class RedactionRules(models.Model):
    """One project's rules; a project without a row redacts nothing (every detector off)."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="redaction_rules")
    # Names of the enabled built-in detectors (redaction.DETECTORS).
    detectors = models.JSONField(default=list, blank=True)
    # [{"label": "ticket", "pattern": "ACME-[0-9]{6}"}], checked by `clean_rules`.
    custom = models.JSONField(default=list, blank=True)
    # Uploaded files (and each event's source record) are kept, redacted, only when this is on;
    # with rules on and this off they are not stored at all. Without any rule on, nothing is
    # redacted and originals are kept as received, whatever this says.
    keep_originals = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"redaction rules of {self.project_id}"

    @classmethod
    def redactor_for(cls, project_id: int) -> Redactor | None:
        """The project's compiled rules with fresh counts, or None when it redacts nothing. One
        small query; the compiling is cached (redaction.Redactor.from_rules). Inside `pinned` for
        the project: the pass's one redactor, no query."""
        pinned = _pinned.get()
        if pinned is not None and project_id in pinned:
            return pinned[project_id]
        row = cls.objects.filter(project_id=project_id).values_list("detectors", "custom", "keep_originals").first()
        if row is None:
            return None
        detectors, custom, keep = row
        return Redactor.from_rules(
            detectors or [], [(rule["label"], rule["pattern"]) for rule in custom or []], keep_originals=keep
        )

    @classmethod
    @contextmanager
    def pinned(cls, project_id: int) -> Iterator[Redactor | None]:
        """The project's rules read once for a pass of many writes (OTLP settling writes a few
        sessions for every trace): meanwhile `redactor_for` answers with the same redactor (its
        counts run on over the pass; the writer counts each append's own) or None, without a
        query each time. A pass is one transaction, so it sees the rules as they were when it
        started, as an import does."""
        redactor = cls.redactor_for(project_id)
        token = _pinned.set({**(_pinned.get() or {}), project_id: redactor})
        try:
            yield redactor
        finally:
            _pinned.reset(token)

    def redactor(self) -> Redactor | None:
        return Redactor.from_rules(
            self.detectors,
            [(rule["label"], rule["pattern"]) for rule in self.custom],
            keep_originals=self.keep_originals,
        )
