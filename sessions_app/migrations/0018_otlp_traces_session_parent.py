# Written by hand (another model change was pending in the shared tree): only this change's
# operations. OpenTelemetry ingest: staged traces and spans, and a session's parent session.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0017_receivedevent'),
    ]

    operations = [
        migrations.AddField(
            model_name='session',
            name='parent',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.DB_SET_NULL, related_name='children', to='sessions_app.session'),
        ),
        migrations.CreateModel(
            name='OtlpTrace',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('trace_id', models.CharField(max_length=32)),
                ('pending', models.BooleanField(default=True)),
                ('root_seen', models.BooleanField(default=False)),
                ('last_received_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('settled_at', models.DateTimeField(blank=True, null=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.DO_NOTHING, related_name='otlp_traces', to='sessions_app.project')),
                ('session', models.ForeignKey(on_delete=django.db.models.deletion.DB_CASCADE, related_name='otlp_traces', to='sessions_app.session')),
            ],
        ),
        migrations.CreateModel(
            name='OtlpSpan',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('span_id', models.CharField(max_length=16)),
                ('parent_span_id', models.CharField(blank=True, max_length=16)),
                ('operation', models.CharField(blank=True, max_length=64)),
                ('start_ns', models.BigIntegerField()),
                ('record', models.TextField(blank=True, null=True)),
                ('session', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.DB_SET_NULL, related_name='+', to='sessions_app.session')),
                ('trace', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.DB_CASCADE, related_name='spans', to='sessions_app.otlptrace')),
            ],
        ),
        migrations.AddIndex(
            model_name='otlptrace',
            index=models.Index(condition=models.Q(('pending', True)), fields=['last_received_at'], name='otlptrace_pending_received'),
        ),
        migrations.AddConstraint(
            model_name='otlptrace',
            constraint=models.UniqueConstraint(fields=('project', 'trace_id'), name='otlptrace_project_trace_uniq'),
        ),
        migrations.AddConstraint(
            model_name='otlpspan',
            constraint=models.UniqueConstraint(fields=('trace', 'span_id'), name='otlpspan_trace_span_uniq'),
        ),
    ]
