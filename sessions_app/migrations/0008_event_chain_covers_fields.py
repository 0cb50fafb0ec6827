
from django.db import migrations, models


def move_kind_counts(apps, schema_editor):
    # The session's counts by kind move from the writer's saved state to a column of their own
    # (readers used to reach into ingest_state for them). Chains written before this migration
    # hash only the raw record: no verification has run under the new form, so none is shown.
    Session = apps.get_model("sessions_app", "Session")
    for session in Session.objects.only("pk", "ingest_state").iterator():
        state = dict(session.ingest_state or {})
        counts = state.pop("kind_counts", None) or {}
        Session.objects.filter(pk=session.pk).update(
            kind_counts=counts, ingest_state=state, chain_valid=None, chain_broken_seq=None,
            chain_checked_at=None,
        )


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0007_remove_event_session_pair'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='session',
            name='llm_calls',
        ),
        migrations.RemoveField(
            model_name='session',
            name='tool_calls',
        ),
        migrations.AddField(
            model_name='event',
            name='cumulative_reward',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='event',
            name='failed',
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='event',
            name='salt',
            field=models.CharField(default='', max_length=32),
        ),
        migrations.AddField(
            model_name='session',
            name='chain_checked_count',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='session',
            name='kind_counts',
            field=models.JSONField(blank=True, default=dict),
        ),
        # Re-imports are recognised by their content, no longer by the chain head (now salted).
        migrations.RemoveIndex(model_name="session", name="session_dedupe"),
        migrations.AddField(
            model_name="session",
            name="source_digest",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                fields=["project", "source_format", "source_session_id", "source_digest"],
                name="session_dedupe_digest",
            ),
        ),
        migrations.RunPython(move_kind_counts, migrations.RunPython.noop),
    ]
