"""Sessions stored before 0021 count their records toward the project's storage quota.

0021 added Session.record_bytes (the characters of every event's record as received, what the
writer adds up) at 0 for every stored session, so a project's older data counted nothing. Each
such session now gets the length of what it stores of each event: the record as received where
it was kept (`raw`), else the event as stored (`payload`), as bundles' events are counted
(ingest/writer.py, _stored_size). One statement; it reads the events of those sessions once.
"""

from django.db import migrations


def backfill(apps, schema_editor):
    Session = apps.get_model("sessions_app", "Session")
    Event = apps.get_model("sessions_app", "Event")
    quote = schema_editor.connection.ops.quote_name
    sessions, events = quote(Session._meta.db_table), quote(Event._meta.db_table)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {sessions} SET record_bytes = COALESCE(("
            f"SELECT SUM(LENGTH(COALESCE(e.raw, e.payload))) FROM {events} e WHERE e.session_id = {sessions}.id"
            f"), 0) WHERE record_bytes = 0 AND event_count > 0"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0023_receivedevent_content_digest"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
