import orjson
from django.db import migrations, models

# The per-field digest verification checks now, not a copy frozen here: a digest made otherwise
# than the running code checks would read as an edit of every session stored before this
# migration. The fields are frozen: a field sealed later needs a migration of its own that adds
# its digest (tests/test_migrations.py holds chain.HEADER_FIELDS to this list and those).
from sessions_app.chain import header_digest

SEALED = (
    "project_id", "source_format", "source_session_id", "run_id", "agent_id", "task", "environment",
    "model", "status", "completed", "started_at", "ended_at", "final_answer", "reward", "metadata",
    "bundle_origin", "created_at", "import_job_id", "parent_id",
)  # fmt: skip


def seal_stored_sessions(apps, schema_editor):
    """Sessions stored before this migration: their fields sealed as they are now. What was
    edited before cannot be told any more; from here on, an edit is found."""
    Session = apps.get_model("sessions_app", "Session")
    for pk, *values in Session.objects.order_by().values_list("pk", *SEALED).iterator():
        seal = orjson.dumps({name: header_digest(name, value) for name, value in zip(SEALED, values)}).decode()
        Session.objects.filter(pk=pk).update(header_seal=seal)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0030_otlp_trace_staged_chars"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="header_seal",
            # A database default too: a worker still running the code before this migration (a
            # rolling upgrade) inserts sessions without the column.
            field=models.TextField(blank=True, default="", db_default=""),
        ),
        migrations.RunPython(seal_stored_sessions, migrations.RunPython.noop),
    ]
