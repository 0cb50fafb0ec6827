"""A project's redaction rules (docs/redaction.md): read and replace them (admins), and try them
on a sample text."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.responses import Status

from .. import access, audit, redaction_rules
from ..models import Role
from ..redaction import DETECTORS, RuleError
from ..redaction_rules import RulesRefused
from .schemas import BodyIn, DetailOut, ErrorOut, Text

router = Router(tags=["projects"])

DENIED = {403: DetailOut, 404: DetailOut}


class CustomRule(BodyIn):
    label: Text = Field(..., description="lowercase letters, digits, '_', '.', '-'; becomes [REDACTED:<label>]")
    pattern: Text = Field(..., description="an RE2 regular expression (no lookaround or backreferences)")


class RedactionRulesOut(Schema):
    detectors: dict[str, bool] = Field(description="every built-in detector, on or off")
    custom: list[CustomRule]
    keep_originals: bool = Field(description="uploaded originals kept (redacted) after import; off: not kept")
    updated_at: datetime | None
    updated_by: str


class RedactionRulesIn(BodyIn):
    read_only = frozenset({"updated_at", "updated_by"})
    detectors: dict[str, bool] = Field(
        default_factory=dict, description=f"detector name -> on; left out: off. Known: {', '.join(DETECTORS)}"
    )
    custom: list[CustomRule] = Field(default_factory=list, max_length=50)
    keep_originals: bool = False


class TryIn(RedactionRulesIn):
    text: str = Field(..., max_length=redaction_rules.MAX_SAMPLE, description="a sample; neither stored nor logged")


class TryOut(Schema):
    text: str
    redactions: dict[str, int]


def _refused(exc: RuleError) -> Status:
    """A 422 whose detail names the first rule that cannot be used, `errors` every one."""
    errors = exc.errors if isinstance(exc, RulesRefused) else [exc]
    return Status(422, {"detail": str(exc), "errors": [{"field": e.field, "message": e.message} for e in errors]})


@router.get("/projects/{slug}/redaction", response={200: RedactionRulesOut, **DENIED}, url_name="redaction")
def get_rules(request: HttpRequest, slug: str):
    """The project's redaction rules. Admins only: a custom rule may spell out the very value
    it removes."""
    project = access.project_for(request, slug, need=Role.ADMIN)
    return redaction_rules.rules_of(project=project)


@router.put("/projects/{slug}/redaction", response={200: RedactionRulesOut, **DENIED, 422: ErrorOut})
def put_rules(request: HttpRequest, slug: str, body: RedactionRulesIn):
    """Replace the project's rules (admins). They apply to everything stored from now on, by
    every ingest path; a rule that cannot be used is a 422 naming it (`custom[1].pattern`)."""
    project = access.project_for(request, slug, need=Role.ADMIN)
    try:
        redaction_rules.set_rules(
            actor=access.actor_of(request), project=project, detectors=body.detectors,
            custom=[rule.dict() for rule in body.custom], keep_originals=body.keep_originals,
            ip=audit.client_ip(request),
        )  # fmt: skip
    except RuleError as exc:
        return _refused(exc)
    return redaction_rules.rules_of(project=project)


@router.post(
    "/projects/{slug}/redaction/try", response={200: TryOut, **DENIED, 422: ErrorOut}, url_name="redaction_try"
)
def try_rules(request: HttpRequest, slug: str, body: TryIn):
    """What a sample text becomes under the rules given (not the stored ones: rules can be tried
    before they are saved). Nothing is stored or logged. Admins."""
    access.project_for(request, slug, need=Role.ADMIN)
    try:
        text, counts = redaction_rules.preview(
            detectors=body.detectors, custom=[rule.dict() for rule in body.custom], text=body.text
        )
    except RuleError as exc:
        return _refused(exc)
    return {"text": text, "redactions": counts}
