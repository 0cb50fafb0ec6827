"""A user's active keys have distinct names whatever their case, held by the database.

Keys made before the check (or by two posts at once) may share a name: the later ones get the
first characters of their prefix added, as the keys page shows them, so nothing is revoked.
"""

from django.db import migrations, models
from django.db.models.functions import Lower


def tell_apart(apps, schema_editor):
    """Names folded by the database, as the index folds them (Python's lower() differs on a few
    letters, which would leave two keys the index refuses)."""
    ApiKey = apps.get_model("sessions_app", "ApiKey")
    active = ApiKey.objects.filter(revoked_at__isnull=True).annotate(folded=Lower("name"))
    seen: set[tuple[int | None, str]] = set()
    for key in active.order_by("created_at", "id"):
        if (key.user_id, key.folded) in seen:
            key.name = f"{key.name[:180]} ({key.key_prefix})"
            key.save(update_fields=["name"])
            key.folded = (
                ApiKey.objects.filter(pk=key.pk).annotate(folded=Lower("name")).values_list("folded", flat=True).get()
            )
        seen.add((key.user_id, key.folded))


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
