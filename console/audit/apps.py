from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "console.audit"
    label = "audit"
