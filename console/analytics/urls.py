from django.urls import path

from console.analytics import views

app_name = "analytics"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("runs/status/", views.run_status, name="run-status"),
    path("runs/", views.run_request, name="run-request"),
]
