from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce


def count_priced_events(apps, schema_editor) -> None:
    """Sessions written before these columns: count their priced and unpriced events once (the
    writer keeps both current from here on, as it keeps cost_usd)."""
    Session = apps.get_model("sessions_app", "Session")
    Event = apps.get_model("sessions_app", "Event")

    def counted(**where) -> Coalesce:
        of_session = (
            Event.objects.filter(session=OuterRef("pk"), **where)
            .order_by()
            .values("session")
            .annotate(n=Count("id"))
            .values("n")
        )
        return Coalesce(Subquery(of_session), 0)

    Session.objects.update(priced_events=counted(cost_usd__isnull=False), unpriced_events=counted(cost_unpriced=True))


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0013_tours_share_links"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="priced_events",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="session",
            name="unpriced_events",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(count_priced_events, migrations.RunPython.noop, elidable=True),
    ]
