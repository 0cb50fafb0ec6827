"""ApiKey.default_project: where a key of all its user's projects writes when a write names no
project, fixed when the key is made (the user's only writable project then), so a project the
user joins later does not make such writes ambiguous (a 400 that lost an exporter's data).

Keys made before it are pinned the same way, to their user's only project with the maintainer
role or above today, when there is exactly one; otherwise they keep asking for a project.
"""

import django.db.models.deletion
from django.db import migrations, models

WRITERS = ("maintainer", "admin")


def pin(apps, schema_editor):
    ApiKey = apps.get_model("sessions_app", "ApiKey")
    Membership = apps.get_model("sessions_app", "Membership")
    unlimited = ApiKey.objects.filter(project__isnull=True, user__isnull=False, revoked_at__isnull=True)
    for key in unlimited.iterator():
        if key.user.is_superuser:
            continue  # admin of every project: never one only
        writable = list(
            Membership.objects.filter(user_id=key.user_id, role__in=WRITERS).values_list("project_id", flat=True)[:2]
        )
        if len(writable) == 1:
            ApiKey.objects.filter(pk=key.pk).update(default_project_id=writable[0])


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0027_comment_restored_from"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="default_project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="sessions_app.project",
            ),
        ),
        migrations.RunPython(pin, migrations.RunPython.noop),
    ]
