"""Dashboard views: small functions that look up, validate, call a workflow and render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from .models import Session


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return redirect("sessions:list")


@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.select_related("project")[:100]
    return render(request, "sessions_app/session_list.html", {"sessions": sessions})


@login_required
def player(request: HttpRequest, session_id: int) -> HttpResponse:
    session = get_object_or_404(Session, pk=session_id)
    return render(request, "sessions_app/player.html", {"session": session})
