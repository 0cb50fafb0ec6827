"""Workflows of a project's redaction rules: reading them, changing them (admins; an audit entry
that names what changed, never a pattern), and trying them on a sample text. The API and the
dashboard both call these; sessions_app/redaction.py compiles and applies the rules, the ingest
writer applies them to everything stored."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from . import audit
from .access import Actor
from .models import Project, RedactionRules
from .redaction import (
    DETECTORS,
    MAX_CUSTOM_RULES,
    Redactor,
    RuleError,
    check_custom_rule,
    check_label,
)

# The longest sample the "test these rules" box takes.
MAX_SAMPLE = 20_000


def rules_of(*, project: Project) -> dict[str, Any]:
    """The project's rules as the API and the page show them: every detector on or off."""
    row = RedactionRules.objects.filter(project=project).first()
    enabled = set(row.detectors) if row is not None else set()
    return {
        "detectors": {name: name in enabled for name in DETECTORS},
        "custom": list(row.custom) if row is not None else [],
        "keep_originals": row.keep_originals if row is not None else False,
        "updated_at": row.updated_at if row is not None else None,
        "updated_by": row.updated_by if row is not None else "",
    }


def clean_rules(*, detectors: Any, custom: Any) -> tuple[list[str], list[dict[str, str]]]:
    """Rules as given made safe to store: `detectors` a {name: on} object (or a list of the
    names that are on), each custom rule checked (`checked_rules`). Raises RuleError naming the
    first field that is wrong (`detectors.emial`, `custom[0].pattern`); for custom rules, a
    RulesRefused that holds every one."""
    if isinstance(detectors, dict):
        for name, on in detectors.items():
            if name not in DETECTORS:
                raise RuleError(f"detectors.{str(name)[:60]}", f"unknown detector; known: {', '.join(DETECTORS)}")
            if not isinstance(on, bool):
                raise RuleError(f"detectors.{name}", "true or false")
        wanted = {name for name, on in detectors.items() if on}
    elif isinstance(detectors, list):
        for index, name in enumerate(detectors):
            if name not in DETECTORS:
                raise RuleError(f"detectors[{index}]", f"unknown detector; known: {', '.join(DETECTORS)}")
        wanted = set(detectors)
    else:
        raise RuleError("detectors", "an object of detector names, each true or false")
    if not isinstance(custom, list):
        raise RuleError("custom", "a list of {label, pattern} rules")
    if len(custom) > MAX_CUSTOM_RULES:
        raise RuleError("custom", f"at most {MAX_CUSTOM_RULES} custom rules")
    cleaned, errors = checked_rules(custom)
    if errors:
        raise RulesRefused(errors)
    return [name for name in DETECTORS if name in wanted], cleaned


class RulesRefused(RuleError):
    """Custom rules that cannot be used: named by the first (what the API reports), `errors`
    holds every one (the page lists them all, so a form is not sent again for each)."""

    def __init__(self, errors: list[RuleError]) -> None:
        super().__init__(errors[0].field, errors[0].message)
        self.errors = errors


def checked_rules(custom: list[Any]) -> tuple[list[dict[str, str]], list[RuleError]]:
    """Each custom rule checked (redaction.check_custom_rule): the ones that can be used, and a
    RuleError for each other one, naming it by its index (`custom[2].pattern`)."""
    cleaned: list[dict[str, str]] = []
    errors: list[RuleError] = []
    for index, rule in enumerate(custom):
        try:
            if not isinstance(rule, dict) or set(rule) - {"label", "pattern"}:
                raise RuleError(f"custom[{index}]", "a rule is an object with a label and a pattern")
            label = check_label(rule.get("label"), f"custom[{index}].label")
            if label in DETECTORS or any(label == kept["label"] for kept in cleaned):
                raise RuleError(f"custom[{index}].label", f"the label {label!r} is taken already")
            check_custom_rule(rule.get("pattern"), f"custom[{index}].pattern")
        except RuleError as exc:
            errors.append(exc)
        else:
            cleaned.append({"label": label, "pattern": rule["pattern"]})
    return cleaned, errors


def set_rules(
    *, actor: Actor, project: Project, detectors: Any, custom: Any, keep_originals: bool, ip: str | None = None
) -> RedactionRules:
    """Replace the project's rules (the caller checked the admin role); raises RuleError.
    They apply to what is stored from now on, not to sessions stored before."""
    names, rules = clean_rules(detectors=detectors, custom=custom)
    with transaction.atomic():
        row, _ = RedactionRules.objects.select_for_update().get_or_create(project=project)
        before = (set(row.detectors), {rule["label"]: rule["pattern"] for rule in row.custom}, row.keep_originals)
        row.detectors, row.custom, row.keep_originals = names, rules, bool(keep_originals)
        row.updated_at, row.updated_by = timezone.now(), actor.name[:150]
        row.save()
        after = {rule["label"]: rule["pattern"] for rule in rules}
        # Which detectors and labels changed, never a pattern: a custom rule may spell out the
        # very value it removes (audit.py: entries never hold a secret).
        audit.record(
            action="redaction.change", actor=actor, project=project, target=f"project:{project.slug}",
            detail={
                "on": sorted(set(names) - before[0]), "off": sorted(before[0] - set(names)),
                "custom_added": sorted(set(after) - set(before[1])),
                "custom_removed": sorted(set(before[1]) - set(after)),
                "custom_changed": sorted(label for label in set(after) & set(before[1])
                                         if after[label] != before[1][label]),
                "keep_originals": row.keep_originals,
            },
            ip=ip,
        )  # fmt: skip
    return row


def preview(*, detectors: Any, custom: Any, text: str) -> tuple[str, dict[str, int]]:
    """What `text` becomes under these rules (not stored, not logged), and the redactions by
    label; raises RuleError for a rule that cannot be used."""
    if len(text) > MAX_SAMPLE:
        raise RuleError("sample", f"at most {MAX_SAMPLE:,} characters")
    names, rules = clean_rules(detectors=detectors, custom=custom)
    redactor = Redactor.from_rules(names, [(rule["label"], rule["pattern"]) for rule in rules])
    if redactor is None:
        return text, {}
    return redactor.text(text), dict(redactor.counts)
