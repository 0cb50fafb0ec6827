"""ApiKey.default_project: where a key of all its user's projects writes when a write names no
project, as its user chose when making it, so a project the user joins later does not make such
writes ambiguous (a 400 that lost an exporter's data).

Keys made before it are not pinned: no one chose for them, and a choice taken from memberships
alone could send writes into a project someone else made and added their user to. They keep
asking for a project when their user can write to several.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0027_comment_restored_from"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="default_project",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+",
                to="sessions_app.project",
            ),
        ),
    ]
