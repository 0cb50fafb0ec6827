from django.db import migrations

import sessions_app.models

# On SQLite the events table is rebuilt once with `id integer NOT NULL PRIMARY KEY` instead of
# `... AUTOINCREMENT` (models.RowIdField says why); PostgreSQL's column does not change.


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0005_event_numbers_64_bit"),
    ]

    operations = [
        migrations.AlterField(
            model_name="event",
            name="id",
            field=sessions_app.models.RowIdField(primary_key=True, serialize=False),
        ),
    ]
