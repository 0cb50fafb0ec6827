"""A user's active keys have distinct names whatever their case, held by the database.

Keys made before the check (or by two posts at once) may share a name: the later ones get the
first characters of their prefix added, as the keys page shows them, so nothing is revoked.
"""

from django.db import migrations, models
from django.db.models.functions import Lower


def tell_apart(apps, schema_editor):
    ApiKey = apps.get_model("sessions_app", "ApiKey")
    seen: set[tuple[int | None, str]] = set()
    for key in ApiKey.objects.filter(revoked_at__isnull=True).order_by("created_at", "id"):
        folded = (key.user_id, key.name.lower())
        if folded in seen:
            key.name = f"{key.name[:180]} ({key.key_prefix})"
            key.save(update_fields=["name"])
            folded = (key.user_id, key.name.lower())
        seen.add(folded)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0025_review_restored_from"),
    ]

    operations = [
        migrations.RunPython(tell_apart, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.UniqueConstraint(
                Lower("name"), "user", condition=models.Q(revoked_at__isnull=True), name="one_active_key_name_per_user"
            ),
        ),
    ]
