from django.db import migrations

# No query ever looked events up by pair_id: calls and responses are paired as events are
# ingested, from the open pairs saved with the session (event_rows.WriterState), and a call
# written in an earlier batch is then updated by its seq. The index only cost every insert.


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0006_event_id_without_autoincrement"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="event", name="event_session_pair"),
    ]
