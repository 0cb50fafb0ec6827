from django.urls import path

from . import views

app_name = "sessions"

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/", views.session_list, name="list"),
    path("sessions/<int:session_id>/", views.player, name="player"),
]
