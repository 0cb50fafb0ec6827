"""Review.restored_from: which key signed the bundle a sign-off was restored from ("" for one made
here), so a restored sign-off is shown as such and is never the session's review state.

Sign-offs restored before it are found as a bundle's restore left them: on a session restored
from a bundle (`bundle_origin`), with no local reviewer (a bundle's reviewer is a name only).
A sign-off made here by a user deleted since has no reviewer either; on a restored session it
is counted as restored too, the cautious side.
"""

from django.db import migrations, models


def mark_restored(apps, schema_editor):
    Review = apps.get_model("sessions_app", "Review")
    Session = apps.get_model("sessions_app", "Session")
    for session_id, origin in Session.objects.filter(bundle_origin__isnull=False).values_list("id", "bundle_origin"):
        fingerprint = str((origin or {}).get("fingerprint") or "bundle")[:64]
        Review.objects.filter(session_id=session_id, reviewer__isnull=True).update(restored_from=fingerprint)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0024_backfill_record_bytes"),
    ]

    operations = [
        migrations.AddField(
            model_name="review",
            name="restored_from",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(mark_restored, migrations.RunPython.noop),
    ]
