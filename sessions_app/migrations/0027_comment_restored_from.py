"""Comment.restored_from: which key signed the bundle a comment was restored from ("" for one
written here), so a restored comment is shown as the bundle's word, not as its named author's.

Comments restored before it are found as 0025 found sign-offs: on a session restored from a
bundle (`bundle_origin`), with no local author (a bundle's author is a name only). A comment
written here by a user deleted since has no author either; on a restored session it is counted
as restored too, the cautious side.
"""

from django.db import migrations, models


def mark_restored(apps, schema_editor):
    Comment = apps.get_model("sessions_app", "Comment")
    Session = apps.get_model("sessions_app", "Session")
    for session_id, origin in Session.objects.filter(bundle_origin__isnull=False).values_list("id", "bundle_origin"):
        fingerprint = str((origin or {}).get("fingerprint") or "bundle")[:64]
        Comment.objects.filter(session_id=session_id, author__isnull=True).update(restored_from=fingerprint)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0026_one_active_key_name_per_user"),
    ]

    operations = [
        migrations.AddField(
            model_name="comment",
            name="restored_from",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(mark_restored, migrations.RunPython.noop),
    ]
