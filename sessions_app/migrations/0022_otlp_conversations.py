import django.db.models.deletion
from django.db import migrations, models
from django.utils.crypto import salted_hmac


def conversations_of_stored_sessions(apps, schema_editor):
    """Each stored OTLP conversation's session, found again by the digest of its stored id
    (written here as ingest/traces.py's conversation_digest was when this was written). An id
    that redaction had changed cannot be found again: its next turns start a new session, as
    they did before."""
    Session = apps.get_model("sessions_app", "Session")
    OtlpConversation = apps.get_model("sessions_app", "OtlpConversation")
    seen: set[tuple[int, str]] = set()
    rows = []
    for pk, project_id, key in (
        Session.objects.filter(source_format="otlp", parent__isnull=True)
        .order_by("pk")
        .values_list("pk", "project_id", "source_session_id")
        .iterator()
    ):
        digest = salted_hmac("replay.otlp.conversation", key, algorithm="sha256").hexdigest()
        if (project_id, digest) not in seen:  # the oldest of sessions a conversation was split over
            seen.add((project_id, digest))
            rows.append(OtlpConversation(project_id=project_id, digest=digest, session_id=pk))
    OtlpConversation.objects.bulk_create(rows, batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0021_quotas_and_originals"),
    ]

    operations = [
        migrations.CreateModel(
            name="OtlpConversation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("digest", models.CharField(max_length=64)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to="sessions_app.project"
                    ),
                ),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.DB_CASCADE, related_name="+", to="sessions_app.session"
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("project", "digest"), name="otlpconversation_project_digest_uniq")
                ],
            },
        ),
        migrations.RunPython(conversations_of_stored_sessions, migrations.RunPython.noop),
    ]
