"""What reviewers leave on a session: comments on its moments, and sign-offs bound to the chain.

The workflows are sessions_app/comments.py and sessions_app/reviews.py; these are the facts.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from .. import markdown
from .sessions import Session


class Comment(models.Model):
    """A comment on one event of a session (`seq`), or a reply in that thread (`parent` is the
    thread's first comment). Its body is Markdown as written; it is shown sanitised."""

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="comments")
    seq = models.BigIntegerField()  # the event the thread is on (a reply has its thread's seq)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.DB_CASCADE, related_name="replies"
    )  # the thread's first comment; null for that first comment itself
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="comments"
    )
    author_name = models.CharField(max_length=150)  # kept when the user is deleted
    body = models.TextField()
    # The text's HTML, made when it was written (markdown.py: rendering on every view was
    # seconds a page), and the digest of the text and renderer it was made from.
    body_html = models.TextField(blank=True, default="")
    body_html_of = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)
    # A deleted comment keeps its place in its thread (replies still answer it), not its body.
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Set on a thread's first comment: the whole thread is resolved.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    # The fingerprint of the key that signed the bundle this comment was restored from ("" for
    # one written here): its author and times are that bundle's word, shown as such.
    restored_from = models.CharField(max_length=64, blank=True, default="")
    # Set when a redaction replaced words in the body (or in an earlier revision): the author did
    # not write the placeholder, so the comment says who changed it and when.
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["session", "seq", "created_at", "id"]
        indexes = [
            # The player's marks and the context panel: a session's threads by seq.
            models.Index(fields=["session", "seq"], name="comment_session_seq"),
        ]

    MARKDOWN_FIELDS = ("body",)

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.session_id}#{self.seq}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        kwargs["update_fields"] = markdown.keep_html(self, kwargs.get("update_fields"))
        super().save(*args, **kwargs)

    @property
    def is_thread(self) -> bool:
        return self.parent_id is None


class CommentRevision(models.Model):
    """A comment's body before an edit: the history an edit keeps."""

    comment = models.ForeignKey(Comment, on_delete=models.DB_CASCADE, related_name="revisions")
    body = models.TextField()
    written_at = models.DateTimeField()  # when this body was written (created or last edited)
    replaced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["comment", "replaced_at", "id"]

    def __str__(self) -> str:
        return f"revision of comment {self.comment_id} at {self.replaced_at:%Y-%m-%d %H:%M}"


class Review(models.Model):
    """A sign-off: a reviewer's verdict on a session as it was verified at that moment. It
    covers events `first_seq`..`last_seq` and names the chain head it verified, so events
    appended later (a live session) are visibly outside it."""

    class Verdict(models.TextChoices):
        APPROVED = "approved", "Approved"
        CHANGES_REQUESTED = "changes_requested", "Changes requested"
        REJECTED = "rejected", "Rejected"

    session = models.ForeignKey(Session, on_delete=models.DB_CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DB_SET_NULL, related_name="reviews"
    )
    reviewer_name = models.CharField(max_length=150)
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    note = models.TextField(blank=True)
    # What the verification run for this sign-off found: the head it verified up to, the range
    # of seqs it covered, and whether the chain held (only a rejection may sign a broken one).
    chain_head = models.CharField(max_length=64)
    chain_valid = models.BooleanField()
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()  # -1 for a session without events
    created_at = models.DateTimeField(default=timezone.now)
    # A sign-off restored from an evidence bundle: the fingerprint of the key that signed it
    # ("" for one made here). Shown as such, and never the session's review state here: its
    # reviewer, verdict and time are what another server's bundle says, not what was checked.
    restored_from = models.CharField(max_length=64, blank=True, default="")
    # Set when a redaction replaced words in the note: the reviewer signed other words.
    redacted_at = models.DateTimeField(null=True, blank=True)
    redacted_by = models.CharField(max_length=150, blank=True, default="")
    # The session's own fields as signed (Session.header_seal when the verification held): a
    # field whose digest differs later changed since the sign-off, however its seal was made
    # again. "" for a restored sign-off or one made before migration 0033.
    header_seal = models.TextField(blank=True, default="", db_default="")

    class Meta:
        ordering = ["session", "-created_at", "-id"]
        indexes = [
            # A session's sign-offs, newest first; the list's "review state" is the newest.
            models.Index(fields=["session", "-created_at"], name="review_session_created"),
        ]

    def __str__(self) -> str:
        return f"{self.verdict} on {self.session_id} by {self.reviewer_name}"
