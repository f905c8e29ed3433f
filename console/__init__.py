"""The Redrive console: Django project package; its apps live inside."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
