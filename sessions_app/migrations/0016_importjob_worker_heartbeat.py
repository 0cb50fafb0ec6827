from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0015_session_start_time_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="importjob",
            name="worker",
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.AddField(
            model_name="importjob",
            name="attempts",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="importjob",
            name="heartbeat_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="importjob",
            index=models.Index(fields=["status"], name="importjob_status"),
        ),
    ]
