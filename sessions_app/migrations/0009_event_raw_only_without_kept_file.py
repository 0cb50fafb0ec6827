
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0008_event_chain_covers_fields'),
    ]

    operations = [
        migrations.AlterField(
            model_name='event',
            name='raw',
            field=models.TextField(blank=True, null=True),
        ),
    ]
