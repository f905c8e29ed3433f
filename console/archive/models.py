from __future__ import annotations

from django.db import models

from console.clusters.models import Cluster


class DeadLetter(models.Model):
    """A dead letter collected from a broker's DLQ: the archive's one row per message.

    (cluster, broker_message_id) is unique, so collecting the same message twice (after
    a crash between commit and ack) never makes a second row.
    """

    STATE_PARKED, STATE_REPLAYING, STATE_REPLAYED, STATE_FAILED, STATE_DISCARDED = (
        "parked", "replaying", "replayed", "failed", "discarded",
    )
    STATE_CHOICES = [
        (STATE_PARKED, "parked"),
        (STATE_REPLAYING, "replaying"),
        (STATE_REPLAYED, "replayed"),
        (STATE_FAILED, "replay failed"),
        (STATE_DISCARDED, "discarded"),
    ]
    PREVIEW_CHARS = 2000

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="dead_letters")
    subscription = models.CharField(max_length=500)
    source = models.CharField(max_length=500)
    payload = models.BinaryField()
    # Decoded start of the payload, for lists and text search without reading blobs.
    payload_preview = models.TextField(blank=True)
    payload_size = models.IntegerField(default=0)
    properties = models.JSONField(default=dict)
    retry_count = models.IntegerField(default=0)
    origin_message_id = models.CharField(max_length=500, blank=True, db_index=True)
    broker_message_id = models.CharField(max_length=500)
    first_failure_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    collected_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=STATE_PARKED)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-collected_at", "-id"]
        permissions = [
            ("replay_deadletter", "Can replay dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
            ("collect_deadletter", "Can collect dead letters from a DLQ"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "broker_message_id"], name="unique_broker_message_per_cluster"
            )
        ]
        indexes = [
            # The archive page: one subscription, one state, newest first.
            models.Index(fields=["cluster", "subscription", "state", "-collected_at"],
                         name="archive_sub_state_time"),
            models.Index(fields=["cluster", "state", "-collected_at"], name="archive_state_time"),
            models.Index(fields=["-collected_at"], name="archive_time"),
        ]

    def __str__(self) -> str:
        return f"{self.broker_message_id} ({self.subscription})"
