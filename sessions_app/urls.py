from django.urls import path

from .views import about, comments, reviews, teams
from .views import sessions as views

app_name = "sessions"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/", views.session_list, name="list"),
    path("sessions/upload/", views.upload, name="upload"),
    path("sessions/imports/", views.imports, name="imports"),
    path("sessions/<int:session_id>/", views.player, name="player"),
    path("sessions/<int:session_id>/search/", views.search, name="search"),
    path("sessions/<int:session_id>/checkpoints/", views.checkpoint, name="checkpoint"),
    path("sessions/<int:session_id>/verify/", views.verify, name="verify"),
    path("sessions/<int:session_id>/charts/", views.session_charts, name="charts"),
    path("sessions/<int:session_id>/comments/", comments.create, name="comment_create"),
    path("sessions/<int:session_id>/comments/<int:comment_id>/edit/", comments.edit, name="comment_edit"),
    path("sessions/<int:session_id>/comments/<int:comment_id>/delete/", comments.delete, name="comment_delete"),
    path("sessions/<int:session_id>/comments/<int:comment_id>/resolve/", comments.resolve, name="comment_resolve"),
    path("sessions/<int:session_id>/reviews/", reviews.sign_off_session, name="sign_off"),
    path("compare/", views.compare, name="diff"),
    path("projects/", teams.projects, name="projects"),
    path("projects/<slug:slug>/", teams.project, name="project"),
    path("projects/<slug:slug>/members/", teams.project_member, name="project_member"),
    path("projects/<slug:slug>/members/remove/", teams.project_member_remove, name="project_member_remove"),
    path("projects/<slug:slug>/settings/", teams.project_settings, name="project_settings"),
    path("projects/<slug:slug>/audit/", teams.audit_log, name="audit"),
    path("projects/<slug:slug>/audit/export/", teams.audit_export, name="audit_export"),
    path("projects/<slug:slug>/audit/verify/", teams.audit_verify, name="audit_verify"),
    path("about/", about.about, name="about"),
    path("account/keys/", teams.keys, name="keys"),
    path("account/keys/<int:key_id>/revoke/", teams.key_revoke, name="key_revoke"),
]
