from django.db import migrations, models


def mark_interrupted(apps, schema_editor):
    # daycare histories imported before this status existed were stored as "completed" with
    # completed false and a pending recovery phase in their metadata: they stopped mid-block.
    Session = apps.get_model("sessions_app", "Session")
    stopped = Session.objects.filter(source_format="daycare", status="completed", completed=False)
    ids = [pk for pk, metadata in stopped.values_list("pk", "metadata") if (metadata or {}).get("pending_phase")]
    Session.objects.filter(pk__in=ids).update(status="interrupted")


def mark_completed(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    Session.objects.filter(status="interrupted").update(status="completed")


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0003_event_session_index_covered_by_seq"),
    ]

    operations = [
        migrations.AlterField(
            model_name="session",
            name="status",
            field=models.CharField(
                choices=[
                    ("live", "Live"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("interrupted", "Interrupted"),
                ],
                default="live",
                max_length=12,
            ),
        ),
        migrations.RunPython(mark_interrupted, mark_completed),
    ]
