"""Forms that validate the dashboard's query strings and posts.

The URL holds the state of every page (docs/dashboard.md lists the parameters); a bad value in a
hand-edited or stale link never raises: the field falls back to its default, so any link still
opens a page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.forms.utils import pretty_name

from . import sharing
from .audit import PROJECT_ACTIONS
from .canonical import ALL_KINDS
from .ingest.uploads import max_upload_bytes
from .models import ImportJob, Project, Review, Role, Session
from .models.bounds import MAX_ID, MAX_POSITION
from .redaction import DETECTORS, MAX_CUSTOM_RULES, MAX_PATTERN, RuleError
from .redaction_rules import MAX_SAMPLE, checked_rules
from .replay.exports import EXPORT_FORMATS
from .replay.imports import parse_job_cursor
from .replay.listing import UNREVIEWED, parse_cursor
from .replay.navigation import parse_search_cursor
from .reviews import MAX_NOTE


def error_text(form: forms.Form, *, full_stops: bool = True) -> str:
    """A form's errors in one line, each field named as the page names it: by its label
    ("Comment", "Session A"), never by the posted field's name; an error of the whole form
    stands alone. `full_stops=False` drops the full stop Django's messages end with, for a
    panel whose own sentence adds one."""
    parts = []
    for name, messages in form.errors.items():
        text = " ".join(m if full_stops else m.rstrip(".") for m in messages)
        field = form.fields.get(name)
        label = None if field is None else field.label or pretty_name(name)
        parts.append(f"{label}: {text}" if label else text)
    return "; ".join(parts)


def labelled(message: str, form: type[forms.Form], *, names: dict[str, str] | None = None) -> str:
    """A workflow's refusal ("body: a comment holds at most …", naming its field as the API
    does) as the form's page names that field: by its label. `names`: the workflow's field names
    the form calls otherwise (a tour's `seq` is the stop form's `step`)."""
    name, colon, rest = message.partition(": ")
    name = (names or {}).get(name, name)
    field = form.base_fields.get(name) if colon else None
    return message if field is None else f"{field.label or pretty_name(name)}: {rest}"


SPEEDS = ("1", "2", "5", "10")
PACES = (("steps", "steps"), ("recorded", "recorded time"))

# "newest" is by when a session ran (its start), not when it was imported.
SORT_LABELS = {
    "-started": "newest", "started": "oldest", "-created": "newest import", "created": "oldest import",
    "-cost": "cost", "-tokens": "tokens", "-steps": "steps", "-events": "events", "-errors": "errors",
    "-duration": "duration",
}  # fmt: skip


def format_choices() -> list[tuple[str, str]]:
    from .formats import known_formats

    return [(name, name) for name in known_formats()]


class KindListField(forms.Field):
    """Event kinds as repeated parameters (`types=a&types=b`) or one comma list (`types=a,b`);
    unknown kinds are dropped rather than refused, so an old link keeps working."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[str]:
        if not value:
            return []
        items = value if isinstance(value, (list, tuple)) else [value]
        kinds: list[str] = []
        for item in items:
            for kind in str(item).split(","):
                kind = kind.strip()
                if kind in ALL_KINDS and kind not in kinds:
                    kinds.append(kind)
        return kinds


def project_choices(projects: list[Project]) -> list[tuple[str, str]]:
    """A project select's choices: any of the caller's projects (access.projects_visible_to, the
    only ones it can pick), or one of them."""
    return [("", "all my projects"), *((p.slug, p.name) for p in projects)]


class QueryForm(forms.Form):
    """A form over request.GET whose invalid fields fall back to their initial value. Those are
    in `ignored` (name: the value given, cut) and no longer in the form's data: the page says
    what it ignored rather than showing it in a field that would claim it applied."""

    ignored: dict[str, str]

    def values(self) -> dict[str, Any]:
        if not hasattr(self, "ignored"):  # once: then the data no longer holds them
            self.is_valid()
            self.ignored = {name: str(self.data.get(name, ""))[:40] for name in self.errors if name in self.data}
            if self.ignored:
                data = self.data.copy()
                for name in self.ignored:
                    data.pop(name)
                self.data = data
        out: dict[str, Any] = {}
        for name, field in self.fields.items():
            if name in self.cleaned_data:
                out[name] = self.cleaned_data[name]
            else:
                out[name] = field.initial
        return out


class PlayerForm(QueryForm):
    step = forms.IntegerField(required=False, min_value=0, max_value=MAX_POSITION)
    types = KindListField(required=False)
    speed = forms.ChoiceField(required=False, choices=[(s, f"{s}×") for s in SPEEDS], initial="1")
    pace = forms.ChoiceField(required=False, choices=PACES, initial="steps")

    def values(self) -> dict[str, Any]:
        out = super().values()
        out["speed"] = out["speed"] or "1"
        out["pace"] = out["pace"] or "steps"
        # A step, speed or pace given but refused ("abc", 999), and kinds Replay does not know: the
        # player says so beside the event it shows, as the lists do (ignored_filters.html).
        out["step_refused"] = self.ignored.get("step")
        out["refused"] = {name: self.ignored[name] for name in ("speed", "pace") if name in self.ignored}
        out["unknown_kinds"] = self._unknown_kinds()
        return out

    def _unknown_kinds(self) -> list[str]:
        given = self.data.getlist("types") if hasattr(self.data, "getlist") else [self.data.get("types") or ""]
        asked = (kind.strip() for item in given for kind in str(item).split(","))
        return list(dict.fromkeys(kind[:40] for kind in asked if kind and kind not in ALL_KINDS))[:5]


class SearchForm(QueryForm):
    q = forms.CharField(
        required=False, max_length=200, strip=True,
        error_messages={"max_length": "at most %(limit_value)d characters (it has %(show_value)d)"},
    )  # fmt: skip
    step = forms.IntegerField(required=False, min_value=0, max_value=MAX_POSITION)
    kind = forms.ChoiceField(required=False, choices=[("", "any kind")] + [(k, k) for k in sorted(ALL_KINDS)])
    errors = forms.BooleanField(required=False)


# The player shows a checkpoint form's errors as "Label: message" (views/checkpoints.py), so the
# labels are the page's words and the messages short sentences a user can act on, not Django's
# defaults about "this value".
_CHECKPOINT_NAME_ERRORS = {
    "required": "give the checkpoint a name",
    "max_length": "at most %(limit_value)d characters (it has %(show_value)d)",
}
# The step is the hidden #checkpoint-step, never typed: a bad one is a page out of date.
_CHECKPOINT_STEP_ERRORS = {
    "required": "no event is shown",
    "invalid": "not an event of this session",
    "min_value": "not an event of this session",
    "max_value": "not an event of this session",
}


class CheckpointForm(forms.Form):
    name = forms.CharField(label="Name", max_length=200, strip=True, error_messages=_CHECKPOINT_NAME_ERRORS)
    # The shown step: the form's #checkpoint-step, which every frame updates out of band.
    step = forms.IntegerField(
        label="Event", min_value=0, max_value=MAX_POSITION, error_messages=_CHECKPOINT_STEP_ERRORS
    )
    replace = forms.BooleanField(required=False)  # "replace it?" answered yes


class CheckpointRenameForm(forms.Form):
    # "New name": the rename form's label in the player.
    name = forms.CharField(label="New name", max_length=200, strip=True, error_messages=_CHECKPOINT_NAME_ERRORS)


class SignOffForm(forms.Form):
    # No verdict chosen at first: a sign-off is a decision, not a default an absent-minded
    # click would record as an approval (the browser asks for one; the server refuses none).
    verdict = forms.ChoiceField(choices=[("", "Choose a verdict…"), *Review.Verdict.choices])
    note = forms.CharField(required=False, max_length=MAX_NOTE, strip=True, widget=forms.Textarea(attrs={"rows": 3}))


class CompareForm(forms.Form):
    # Bounded: a larger number than a database integer holds is a form error, not a 500.
    a = forms.IntegerField(label="Session A", min_value=1, max_value=MAX_ID)
    b = forms.IntegerField(label="Session B", min_value=1, max_value=MAX_ID)
    offset = forms.IntegerField(required=False, min_value=0, max_value=MAX_POSITION)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("a") is not None and data.get("a") == data.get("b"):
            raise ValidationError("Pick two different sessions to compare.")
        return data


class ImportFilterForm(QueryForm):
    """The imports page: jobs of one project and/or status, and its keyset cursors."""

    project = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *ImportJob.Status.choices])
    after = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    before = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        """`projects`: the caller's (access.projects_visible_to), the only ones it can pick."""
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)

    def values(self) -> dict[str, Any]:
        out = super().values()
        out["after"] = parse_job_cursor(out["after"])
        out["before"] = parse_job_cursor(out["before"])
        return out


class ProblemPageForm(QueryForm):
    page = forms.IntegerField(required=False, min_value=1, max_value=10_000, initial=1)


class EventSearchForm(QueryForm):
    """The search inside events across sessions: text, one project or all, and the keyset
    cursor `<session id>~<seq>` of the last hit of the page before."""

    q = forms.CharField(required=False, max_length=200, strip=True, label="Text in events")
    project = forms.ChoiceField(required=False)
    after = forms.CharField(required=False, max_length=60, widget=forms.HiddenInput)

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        """`projects`: the caller's (access.projects_visible_to), the only ones it can pick."""
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)

    def values(self) -> dict[str, Any]:
        out = super().values()
        out["after"] = parse_search_cursor(out["after"])
        return out


class ComparePickerForm(QueryForm):
    """The player's "compare with…": text matched against the project's sessions."""

    q = forms.CharField(required=False, max_length=200, strip=True, label="Find a session")


class SessionFilterForm(QueryForm):
    q = forms.CharField(required=False, max_length=200, strip=True, label="Search")
    project = forms.ChoiceField(required=False)
    format = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *Session.Status.choices])
    model = forms.CharField(required=False, max_length=200, strip=True)
    start = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    errors = forms.ChoiceField(
        required=False, label="Errors", choices=[("", "any"), ("yes", "with errors"), ("no", "without")]
    )
    review = forms.ChoiceField(
        required=False, label="Review", choices=[("", "any"), *Review.Verdict.choices, (UNREVIEWED, "unreviewed")]
    )
    sort = forms.ChoiceField(required=False, choices=list(SORT_LABELS.items()), initial="-started")
    after = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    before = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    # The sessions picked as A and B to compare: not filters, but carried from page to page (and
    # through a filter change) so that two sessions on different pages can be compared.
    a = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID, widget=forms.HiddenInput)
    b = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID, widget=forms.HiddenInput)

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        """`projects`: the caller's (access.projects_visible_to), the only ones it can pick."""
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)
        self.fields["format"].choices = [("", "any format"), *format_choices()]

    def values(self) -> dict[str, Any]:
        out = super().values()
        out["sort"] = out["sort"] or "-started"
        out["after"] = parse_cursor(out["after"], out["sort"])
        out["before"] = parse_cursor(out["before"], out["sort"])
        return out


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        single = super().clean
        if isinstance(data, (list, tuple)) and data:
            return [single(item, initial) for item in data]
        if isinstance(data, (list, tuple)):  # no file came: "required", not an empty success
            data = None
        return [single(data, initial)]


class UploadForm(forms.Form):
    # Empty files reach accept_upload, whose message names the file among several.
    files = MultipleFileField(label="Session files", allow_empty_file=True)
    # A slug, offered as a select of the caller's writable projects but checked by the view
    # through access.py like the API's (404 for another team's, 403 below maintainer). Left
    # empty, the upload goes to the caller's only project they may write to.
    project = forms.SlugField(label="Project", required=False, max_length=100)
    format = forms.ChoiceField(required=False, label="Format")

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        """`projects`: those the caller may upload to (maintainer or admin)."""
        # Its own ids: the sessions list's filters, on the same page, have a project too.
        kwargs.setdefault("auto_id", "upload_%s")
        super().__init__(*args, **kwargs)
        self.fields["project"].widget = forms.Select(choices=[(p.slug, p.name) for p in projects])
        self.fields["format"].choices = [("", "detect from content"), *format_choices()]
        # The page refuses a larger file before sending it (replay.js), as the server would.
        self.max_bytes = max_upload_bytes()


# --- teams: projects, members, keys, the audit log --------------------------------------------


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200, strip=True)
    slug = forms.CharField(max_length=100, required=False, strip=True, help_text="empty: made from the name")


class MemberForm(forms.Form):
    """Add a member, or change a member's role (teams.set_member does both)."""

    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class RemoveMemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)


class ProjectSettingsForm(forms.Form):
    """A project's retention and quotas (admins); each empty follows the server's default."""

    retention_days = forms.IntegerField(
        required=False, min_value=1, max_value=36500, label="Keep sessions for (days)",
        help_text="empty: the server's default",
    )  # fmt: skip
    quota_mb = forms.IntegerField(required=False, min_value=1, max_value=10**9, label="Storage quota (MB)")
    max_sessions = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1, label="Sessions quota")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The server's quotas are ceilings (any signed-in user may make a project and be its
        admin, so a quota above them would undo the operator's): a project's own may be lower."""
        super().__init__(*args, **kwargs)
        for name, server, unit, setting in (
            ("quota_mb", settings.QUOTA_STORED_BYTES, MIB, "REPLAY_QUOTA_STORED_MB"),
            ("max_sessions", settings.QUOTA_SESSIONS, 1, "REPLAY_QUOTA_SESSIONS"),
        ):
            if server is not None:
                ceiling = server // unit or 1
                self.fields[name].widget.attrs["max"] = ceiling
                self.fields[name].validators.append(_at_most(ceiling, setting))

    @classmethod
    def of(cls, project: Project) -> ProjectSettingsForm:
        """The project's settings as they hold: a quota of its own above a server ceiling lowered
        since counts as the ceiling (ingest/quotas.py), so it is shown as that, and saving the
        form keeps what holds instead of being refused for a value no one typed."""
        mb = _capped(project.max_stored_bytes, settings.QUOTA_STORED_BYTES)
        sessions = _capped(project.max_sessions, settings.QUOTA_SESSIONS)
        return cls(initial={"retention_days": project.retention_days, "max_sessions": sessions,
                            "quota_mb": None if mb is None else -(-mb // MIB)})  # fmt: skip

    def project_fields(self) -> dict[str, int | None]:
        """The Project fields the valid form sets."""
        mb = self.cleaned_data["quota_mb"]
        return {"retention_days": self.cleaned_data["retention_days"], "max_sessions": self.cleaned_data["max_sessions"],
                "max_stored_bytes": None if mb is None else mb * MIB}  # fmt: skip


MIB = 1024 * 1024


def _capped(own: int | None, ceiling: int | None) -> int | None:
    """A project's own quota as it holds under the server's (None: no quota of its own)."""
    return own if own is None or ceiling is None else min(own, ceiling)


def _at_most(ceiling: int, setting: str):
    def check(value: int | None) -> None:
        if value is not None and value > ceiling:
            raise ValidationError(f"at most {ceiling}: the server's quota ({setting}) is the ceiling")

    return check


class AuditFilterForm(QueryForm):
    actor = forms.CharField(required=False, max_length=200, strip=True)
    action = forms.ChoiceField(required=False, choices=[("", "any action"), *((a, a) for a in PROJECT_ACTIONS)])
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    before = forms.IntegerField(required=False, min_value=0, max_value=MAX_POSITION, widget=forms.HiddenInput)


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=200, strip=True)
    project = forms.ChoiceField(required=False, label="Only for project")
    read_only = forms.BooleanField(required=False, label="Read-only")
    # For a key of all projects: where a write that names no project goes. Chosen here, in view
    # of the name, never taken from memberships alone (anyone may add anyone to a project).
    writes_to = forms.ChoiceField(required=False, label="Writes naming no project go to")

    def __init__(self, *args: Any, projects: list[Project], **kwargs: Any) -> None:
        """`projects`: the caller's (access.projects_visible_to); a key never reaches beyond them."""
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = project_choices(projects)
        writable = [p for p in projects if p.role is not None and p.role.includes(Role.MAINTAINER)]
        # None chosen unless chosen: a user's only writable project may be one someone else made
        # and added them to, and a key writing there for good would be theirs to read.
        self.fields["writes_to"].choices = [("", "none: each write names its project"),
                                            *((p.slug, p.name) for p in writable)]  # fmt: skip


class CommentForm(forms.Form):
    # The body's limit is the workflow's (comments.MAX_BODY), answered with its message.
    body = forms.CharField(label="Comment", strip=True)
    seq = forms.IntegerField(label="Event", required=False, min_value=0, max_value=MAX_POSITION)
    parent = forms.IntegerField(label="Reply to", required=False, min_value=1, max_value=MAX_ID)


class CommentEditForm(forms.Form):
    body = forms.CharField(label="Comment", strip=True)


class ResolveForm(forms.Form):
    resolved = forms.BooleanField(required=False)  # "false" opens a resolved thread again


class ShareLinkForm(forms.Form):
    expires_in_days = forms.IntegerField(
        label="Expires in (days)", min_value=1, max_value=sharing.MAX_DAYS, initial=sharing.DEFAULT_DAYS
    )
    note = forms.CharField(label="Note", required=False, max_length=sharing.MAX_NOTE, strip=True)
    allow_export = forms.BooleanField(label="Allow export", required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Its own ids: the player it is loaded into has a sign-off form with a note too.
        kwargs.setdefault("auto_id", "share_%s")
        super().__init__(*args, **kwargs)


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=[(name, name) for name in EXPORT_FORMATS])


class LiveTailForm(forms.Form):
    """The player's live tail: the seq it starts after (else Last-Event-ID, else the start)."""

    after = forms.IntegerField(required=False, min_value=-1, max_value=MAX_POSITION)


# --- tours ------------------------------------------------------------------------------------
# Lengths are the workflow's (sessions_app/tours.py), answered with its message naming the field.


class TourForm(forms.Form):
    title = forms.CharField(max_length=200, strip=True)
    description = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs={"rows": 4}))


class TourStopForm(forms.Form):
    title = forms.CharField(max_length=200, strip=True)
    narration = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs={"rows": 4}))


class TourStopMoveForm(forms.Form):
    direction = forms.ChoiceField(choices=[("up", "up"), ("down", "down")])


class TourStopAddForm(forms.Form):
    """The player's "add this step to a tour…": an existing tour, or a new one's title."""

    # The shown step: the player's #nav-step (hx-include), never the step the page loaded at.
    step = forms.IntegerField(min_value=0, max_value=MAX_POSITION)
    tour = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID)
    new_tour = forms.CharField(required=False, max_length=200, strip=True, label="New tour's title")
    title = forms.CharField(max_length=200, strip=True, label="Stop title")
    narration = forms.CharField(required=False, strip=True, widget=forms.Textarea(attrs={"rows": 3}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("tour") and not data.get("new_tour") and "tour" not in self.errors:
            self.add_error("new_tour", "Pick a tour, or give a new tour a title.")
        elif data.get("tour") and data.get("new_tour"):
            # Which one was meant? The title had been dropped without a word, the stop added to
            # the tour the picker showed (a stop had landed in another team's tour).
            self.add_error("new_tour", "Pick “a new tour” to make one with this title, or clear the title.")
        return data


class TourModeForm(QueryForm):
    """The player's tour mode (`?tour=<id>&stop=<N>`, N 1-based) and /tours/<id>/play/?stop=N."""

    tour = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID)
    stop = forms.IntegerField(required=False, min_value=1, max_value=10_000)


class RedactionForm(forms.Form):
    """A project's redaction rules on its page: detectors ticked, custom rules one a line as
    `label = pattern`, whether originals are kept (redaction_rules.set_rules checks them)."""

    detectors = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple,
        choices=[(name, detector.title) for name, detector in DETECTORS.items()],
    )  # fmt: skip
    custom = forms.CharField(
        required=False, strip=False, label="Custom rules", max_length=MAX_CUSTOM_RULES * (MAX_PATTERN + 60),
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="one a line: label = pattern (RE2, e.g. ticket = ACME-[0-9]{6})",
    )  # fmt: skip
    keep_originals = forms.BooleanField(required=False, label="Keep uploaded originals (redacted)")

    def clean_custom(self) -> list[dict[str, Any]]:
        """The rules, each with the line it was written on (`line`, for error messages). A line
        not written `label = pattern` is refused, and with it what is wrong with every other
        line (`checked_rules`), so one send shows every line to mend."""
        rules = []
        unwritten: list[tuple[int, str]] = []
        for number, line in enumerate(self.cleaned_data["custom"].splitlines(), 1):
            if not line.strip():
                continue
            label, equals, pattern = line.partition("=")
            if not equals or not label.strip() or not pattern.strip():
                unwritten.append((number, f"line {number}: write label = pattern"))
                continue
            rules.append({"label": label.strip(), "pattern": pattern.strip(), "line": number})
        if unwritten:
            _, errors = checked_rules([{"label": rule["label"], "pattern": rule["pattern"]} for rule in rules])
            wrong = unwritten + [(rule_of(rules, error)["line"], rule_error_text(rules, error)) for error in errors]
            raise ValidationError([text for _, text in sorted(wrong)])
        return rules


def rule_of(rules: list[dict[str, Any]], error: RuleError) -> dict[str, Any]:
    """The rule (as `clean_custom` gave it) a `custom[N]...` RuleError names."""
    return rules[int(error.field[len("custom[") : error.field.index("]")])]


def rule_error_text(rules: list[dict[str, Any]], error: RuleError) -> str:
    """A custom rule's RuleError as the page says it: by the line it was written on."""
    rule = rule_of(rules, error)
    return f"line {rule['line']} ({rule['label']}): {error.message}"


class RedactionTryForm(RedactionForm):
    """The "test these rules" box: the rules as they stand in the form, and a sample."""

    # Its fields share one <form> with "Save rules": a sample the browser required would stop the
    # save too. The Test post still needs one (the server says so).
    use_required_attribute = False

    sample = forms.CharField(
        max_length=MAX_SAMPLE, strip=False, label="Sample text", widget=forms.Textarea(attrs={"rows": 4})
    )


class RedactValueForm(forms.Form):
    """The player's "Redact…": a value selected in the context panel (or pasted), the event it was
    selected at, and its label (stored_redaction.redact_text checks the rest)."""

    text = forms.CharField(label="Value", max_length=10_000, strip=False, widget=forms.Textarea(attrs={"rows": 2}))
    seq = forms.IntegerField(label="Event", min_value=0, max_value=MAX_POSITION, widget=forms.HiddenInput)
    label = forms.CharField(required=False, max_length=40, initial="manual")
