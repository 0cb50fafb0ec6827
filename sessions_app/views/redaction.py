"""A project's redaction rules page (admins): the detectors, custom rules and originals setting,
and a "test these rules" box that shows what a sample becomes under the rules as they stand in
the form, saved or not. The sample is neither stored nor logged (docs/redaction.md)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods, require_POST

from .. import access, audit, redaction_rules
from ..forms import RedactionForm, RedactionTryForm, rule_error_text
from ..models import Project, Role
from ..redaction import DETECTOR_GROUPS, DETECTORS, RuleError
from ..redaction_rules import RulesRefused
from .pages import login_required, wants_partial

TEMPLATE = "sessions_app/redaction.html"


@login_required
@require_http_methods(["GET", "POST"])
def rules(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.project_for(request, slug, need=Role.ADMIN)
    if request.method == "GET":
        return _page(request, project, RedactionForm(initial=_initial(project)))
    form = RedactionForm(request.POST)
    if form.is_valid():
        try:
            redaction_rules.set_rules(
                actor=access.actor_of(request), project=project, detectors=form.cleaned_data["detectors"],
                custom=_rules(form), keep_originals=form.cleaned_data["keep_originals"], ip=audit.client_ip(request),
            )  # fmt: skip
        except RuleError as exc:
            _refused(form, exc)
        else:
            return redirect("sessions:redaction", slug=project.slug)
    # The sample shares the form: kept as typed, for a Test once the rules are mended.
    sample = RedactionTryForm(initial={"sample": request.POST.get("sample", "")})
    return _page(request, project, form, try_form=sample, status=400)


@login_required
@require_POST
def try_rules(request: HttpRequest, slug: str) -> HttpResponse:
    """The preview of a sample: the #redaction-preview partial, or (without htmx) the page."""
    project = access.project_for(request, slug, need=Role.ADMIN)
    form = RedactionTryForm(request.POST)
    preview: dict[str, Any] = {}
    if form.is_valid():
        try:
            text, counts = redaction_rules.preview(
                detectors=form.cleaned_data["detectors"], custom=_rules(form), text=form.cleaned_data["sample"]
            )
        except RuleError as exc:
            _refused(form, exc)
        else:
            preview = {"text": text, "counts": sorted(counts.items())}
    status = 200 if preview else 400
    if wants_partial(request):
        response = render(request, f"{TEMPLATE}#redaction-preview", {"preview": preview, "try_form": form},
                          status=status)  # fmt: skip
        patch_vary_headers(response, ["HX-Request"])
        return response
    return _page(request, project, RedactionForm(request.POST), try_form=form, preview=preview, status=status)


def _page(request: HttpRequest, project: Project, form: RedactionForm, *, status: int = 200,
          **extra: Any) -> HttpResponse:  # fmt: skip
    current = redaction_rules.rules_of(project=project)
    groups = [
        {"title": title, "detectors": [d for d in DETECTORS.values() if d.group == group]}
        for group, title in DETECTOR_GROUPS.items()
    ]
    context = {
        "project": project, "form": form, "try_form": extra.pop("try_form", None) or RedactionTryForm(),
        "preview": extra.pop("preview", {}), "groups": groups, "current": current,
        "active": any(current["detectors"].values()) or bool(current["custom"]),
    }  # fmt: skip
    response = render(request, TEMPLATE, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


def _initial(project: Project) -> dict[str, Any]:
    current = redaction_rules.rules_of(project=project)
    return {
        "detectors": [name for name, on in current["detectors"].items() if on],
        "custom": "\n".join(f"{rule['label']} = {rule['pattern']}" for rule in current["custom"]),
        "keep_originals": current["keep_originals"],
    }


def _rules(form: RedactionForm) -> list[dict[str, str]]:
    return [{"label": rule["label"], "pattern": rule["pattern"]} for rule in form.cleaned_data["custom"]]


def _refused(form: RedactionForm, exc: RuleError) -> None:
    """A RuleError on the form: custom rules' each by the line it was written on."""
    if exc.field.startswith("custom["):
        rules = form.cleaned_data["custom"]  # read first: add_error drops the field from cleaned_data
        for error in exc.errors if isinstance(exc, RulesRefused) else [exc]:
            form.add_error("custom", rule_error_text(rules, error))
    elif exc.field.startswith("detectors"):
        form.add_error("detectors", exc.message)
    else:
        form.add_error(None, str(exc))
