"""The Celery application of the job runner (worker and beat)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("redrive")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
