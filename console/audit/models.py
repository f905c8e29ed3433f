from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """One action that changed a broker or the archive: who, what, where, how many, result.

    The actor's and cluster's names are copied so the entry outlives them.
    """

    RESULT_OK, RESULT_ERROR = "ok", "error"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64, db_index=True)
    cluster_name = models.CharField(max_length=200, blank=True)
    subscription = models.CharField(max_length=500, blank=True)
    count = models.IntegerField(default=0)
    result = models.CharField(max_length=16, default=RESULT_OK)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_name} {self.action}"
