from django.urls import path

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
    path("compare/", views.compare, name="diff"),
]
