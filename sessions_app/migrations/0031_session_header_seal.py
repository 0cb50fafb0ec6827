from django.db import migrations, models

# The seal verification checks now, not a copy frozen here: a seal made otherwise than the
# running code checks would read as an edit of every session stored before this migration.
from sessions_app.chain import HEADER_FIELDS, header_seal


def seal_stored_sessions(apps, schema_editor):
    """Sessions stored before this migration: their fields sealed as they are now. What was
    edited before cannot be told any more; from here on, an edit is found."""
    Session = apps.get_model("sessions_app", "Session")
    for pk, *values in Session.objects.order_by().values_list("pk", *HEADER_FIELDS).iterator():
        Session.objects.filter(pk=pk).update(header_seal=header_seal(dict(zip(HEADER_FIELDS, values))))


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0030_otlp_trace_staged_chars"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="header_seal",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(seal_stored_sessions, migrations.RunPython.noop),
    ]
