# Quotas and bounded resources (issue 20 item 4): per-project limits, sessions' record bytes, the kept originals' clean-up, request digests of idempotency keys.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0020_redaction_jobs'),
    ]

    operations = [
        migrations.AddField(
            model_name='importjob',
            name='original_deleted_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='importjob',
            name='orphaned_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='ingestbatch',
            name='body_digest',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddField(
            model_name='project',
            name='max_sessions',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='project',
            name='max_stored_bytes',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='session',
            name='idempotency_digest',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddField(
            model_name='session',
            name='record_bytes',
            field=models.BigIntegerField(default=0),
        ),
    ]
