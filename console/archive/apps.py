from django.apps import AppConfig


class ArchiveConfig(AppConfig):
    name = "console.archive"
    label = "archive"
