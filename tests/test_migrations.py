"""Data migrations: what they do to rows stored before them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("sessions_app", "0003_event_session_index_covered_by_seq")]
AFTER = [("sessions_app", "0004_session_status_interrupted")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_0004_moves_stored_daycare_histories_that_stopped_mid_block_to_interrupted():
    apps = migrate(BEFORE)
    Project = apps.get_model("sessions_app", "Project")
    Session = apps.get_model("sessions_app", "Session")
    project = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]

    def stored(fmt: str, completed: bool, metadata: dict):
        return Session.objects.create(
            project=project, source_format=fmt, status="completed", completed=completed, metadata=metadata
        ).pk

    pending = stored("daycare", False, {"pending_phase": "tool_call"})
    finished = stored("daycare", True, {"pending_phase": None})
    other_format = stored("rlm_native", False, {"pending_phase": "tool_call"})
    try:
        apps = migrate(AFTER)
        status = dict(apps.get_model("sessions_app", "Session").objects.values_list("pk", "status"))
        assert status[pending] == "interrupted"
        assert status[finished] == "completed"
        assert status[other_format] == "completed"

        apps = migrate(BEFORE)  # and back: nothing is left with a status the old code lacks
        status = dict(apps.get_model("sessions_app", "Session").objects.values_list("pk", "status"))
        assert status[pending] == "completed"
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
