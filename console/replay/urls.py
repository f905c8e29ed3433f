from django.urls import path  # noqa: F401

app_name = "replay"
urlpatterns: list = []
