from django.db import migrations


def create_default_project(apps, schema_editor):
    Project = apps.get_model("sessions_app", "Project")
    Project.objects.get_or_create(slug="default", defaults={"name": "Default"})


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0001_initial")]

    operations = [migrations.RunPython(create_default_project, migrations.RunPython.noop)]
