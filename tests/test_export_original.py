"""`export?format=original` gives back what was received, byte for byte, for every format."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from django.conf import settings

from sessions_app.jobs import run_import
from sessions_app.models import ImportJob, Session

from .builders_replay import api  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db

ROOT = Path(settings.BASE_DIR)
ONE_OF_EACH = {
    "rlm native JSONL": ROOT / "demo" / "rlm_success.jsonl",
    "rlm trajectory JSONL": ROOT / "demo" / "rlm_trajectory_logger.jsonl",
    "rlm snapshot JSON": ROOT / "demo" / "rlm_snapshot.json",
    "AgentLens events body": ROOT / "tests" / "fixtures" / "agentlens" / "two_sessions_body.json",
    "AgentLens JSON array": ROOT / "tests" / "fixtures" / "agentlens" / "two_sessions_array.json",
    "AgentLens JSONL": ROOT / "tests" / "fixtures" / "agentlens" / "two_sessions.ndjson",
    "AgentLens pretty document": ROOT / "demo" / "agentlens_deploy_review.json",
    "flux0 recording": ROOT / "demo" / "flux0_support_chat.jsonl",
    "daycare history": ROOT / "demo" / "daycare_interrupted.jsonl",
}


def _upload(api, path: Path, name: str, django_capture_on_commit_callbacks) -> list[Session]:  # noqa: F811
    with path.open("rb") as handle, django_capture_on_commit_callbacks(execute=False):
        response = api.post("/api/imports", {"file": handle}, format="multipart")
    assert response.status_code == 202, response.content
    job = ImportJob.objects.get(pk=response.json()["job"])
    run_import(job_id=job.pk)
    sessions = list(Session.objects.filter(import_job=job))
    assert sessions, ImportJob.objects.get(pk=job.pk).error
    return sessions


@pytest.mark.parametrize("name", list(ONE_OF_EACH))
def test_the_original_of_every_format_is_the_upload_byte_for_byte(api, name, django_capture_on_commit_callbacks):  # noqa: F811
    path = ONE_OF_EACH[name]
    for session in _upload(api, path, name, django_capture_on_commit_callbacks):
        response = api.get(f"/api/sessions/{session.pk}/export?format=original")
        assert response.status_code == 200
        assert b"".join(response.streaming_content) == path.read_bytes()
        assert response.headers["Content-Disposition"] == f'attachment; filename="{path.name}"'


def test_a_gzip_upload_gives_back_its_content_undone(api, tmp_path, django_capture_on_commit_callbacks):  # noqa: F811
    path = ONE_OF_EACH["AgentLens events body"]
    packed = tmp_path / "events.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    (session, *_) = _upload(api, packed, "gz", django_capture_on_commit_callbacks)
    response = api.get(f"/api/sessions/{session.pk}/export?format=original")
    assert b"".join(response.streaming_content) == path.read_bytes()
    assert response.headers["Content-Disposition"] == 'attachment; filename="events.json"'


def test_a_command_line_import_keeps_its_original_too(api, tmp_path):  # noqa: F811
    from django.core.management import call_command

    source = tmp_path / "copy.json"
    source.write_bytes(ONE_OF_EACH["AgentLens JSON array"].read_bytes())
    call_command("import_sessions", str(source), stdout=open("/dev/null", "w"))
    source.write_bytes(b"changed afterwards")
    session = Session.objects.order_by("pk").first()
    response = api.get(f"/api/sessions/{session.pk}/export?format=original")
    assert b"".join(response.streaming_content) == ONE_OF_EACH["AgentLens JSON array"].read_bytes()


def test_a_command_line_import_from_a_pipe_keeps_what_came_through_it(api, tmp_path):  # noqa: F811
    # `import_sessions <(zcat run.jsonl.gz)`: a named pipe, which the kernel's file copy refuses.
    import os
    import threading

    from django.core.management import call_command

    body = ONE_OF_EACH["AgentLens JSON array"].read_bytes()
    pipe = tmp_path / "piped.json"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_bytes, args=(body,))
    writer.start()
    call_command("import_sessions", str(pipe), stdout=open("/dev/null", "w"))
    writer.join(timeout=10)
    session = Session.objects.order_by("pk").first()
    response = api.get(f"/api/sessions/{session.pk}/export?format=original")
    assert b"".join(response.streaming_content) == body
    assert ImportJob.objects.get().original_name == "piped.json"


def test_importing_the_same_file_again_by_command_keeps_no_second_copy(tmp_path, settings):
    from django.core.management import call_command

    source = tmp_path / "again.json"
    source.write_bytes(ONE_OF_EACH["AgentLens JSON array"].read_bytes())
    for _ in range(2):
        call_command("import_sessions", str(source), stdout=open("/dev/null", "w"))
    kept = [p for p in Path(settings.DATA_DIR).rglob("*") if p.is_file()]
    assert len(kept) == 1 and ImportJob.objects.count() == 1
    assert Session.objects.filter(import_job__isnull=False).count() == Session.objects.count() == 2


def test_a_session_with_no_original_says_why_instead_of_an_empty_download(api, django_capture_on_commit_callbacks):  # noqa: F811
    from django.test import Client
    from django.utils import timezone

    from sessions_app.models import Event

    path = ONE_OF_EACH["daycare history"]
    (session,) = _upload(api, path, "daycare", django_capture_on_commit_callbacks)
    assert Event.objects.filter(session=session, raw__isnull=False).count() == 0  # the file holds them
    ImportJob.objects.filter(pk=session.import_job_id).update(stored_path="", original_deleted_at=timezone.now())
    refused = api.get(f"/api/sessions/{session.pk}/export?format=original")
    assert refused.status_code == 404
    assert refused.json() == {
        "detail": "format=original: the file it was imported from was deleted (a redaction or the clean-up)"
    }
    assert api.get(f"/api/sessions/{session.pk}/export?format=jsonl").status_code == 200
    page = Client()
    page.force_login(_owner())
    player = page.get(f"/sessions/{session.pk}/").content.decode()
    assert "original records: not kept" in player and "?format=original" not in player
    download = page.get(f"/sessions/{session.pk}/export/?format=original")
    assert download.status_code == 404 and b"was deleted" in download.content


def _owner():
    from django.contrib.auth import get_user_model

    from sessions_app.models import Membership, Project, Role

    user = get_user_model().objects.create_user("owen", password="pw-owen-123")
    Membership.objects.create(project=Project.get_default(), user=user, role=Role.MAINTAINER)
    return user
