from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Recorded sessions"
    default_auto_field = "django.db.models.BigAutoField"
