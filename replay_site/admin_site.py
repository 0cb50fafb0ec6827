"""Django's admin site, for superusers only.

Django lets any active staff user in and shows them the models their permissions name: a staff
user given "view event" there read every project's events and the site's sign-in log, past the
project scoping every other page goes through (sessions_app/access.py). No role of Replay's is
staff; only a superuser, who acts as admin of every project, may look here.
"""

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig


class SuperusersOnlyAdminSite(AdminSite):
    def has_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser


class ReplayAdminConfig(AdminConfig):
    default_site = "replay_site.admin_site.SuperusersOnlyAdminSite"
