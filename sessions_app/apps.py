from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Recorded sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth import signals as auth_signals
        from django.db.models.signals import pre_delete

        from . import signin, teams

        # Django's only hook for sign-ins made by any view (ours, the admin's): sessions_app/signin.py.
        auth_signals.user_logged_in.connect(signin.record_login, dispatch_uid="replay-audit-login")
        auth_signals.user_login_failed.connect(signin.record_login_failed, dispatch_uid="replay-audit-login-failed")
        auth_signals.user_logged_out.connect(signin.record_logout, dispatch_uid="replay-audit-logout")
        pre_delete.connect(
            teams.hold_the_account_deleted, sender=get_user_model(), dispatch_uid="replay-account-delete"
        )
