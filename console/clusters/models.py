from __future__ import annotations

from django.db import models

from console.clusters.secrets import decrypt_secret, encrypt_secret


class Cluster(models.Model):
    """A broker installation the console is connected to."""

    KIND_PULSAR, KIND_ROCKETMQ, KIND_RABBITMQ = "pulsar", "rocketmq", "rabbitmq"
    KIND_CHOICES = [
        (KIND_PULSAR, "Apache Pulsar"),
        (KIND_ROCKETMQ, "RocketMQ-style (Redis Streams)"),
        (KIND_RABBITMQ, "RabbitMQ"),
    ]

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    service_url = models.CharField(max_length=500)
    admin_url = models.CharField(max_length=500, blank=True)
    username = models.CharField(max_length=200, blank=True)
    # Encrypted at rest; never rendered, serialised or logged.
    password_encrypted = models.TextField(blank=True)
    token_encrypted = models.TextField(blank=True)
    options = models.JSONField(default=dict, blank=True)
    collect_interval_seconds = models.PositiveIntegerField(default=300)
    last_check_at = models.DateTimeField(null=True, blank=True)
    last_check_ok = models.BooleanField(null=True, blank=True)
    last_check_message = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        permissions = [("rebuild_cluster", "Can rebuild retry/DLQ topology")]

    def __str__(self) -> str:
        return self.name

    @property
    def password(self) -> str:
        return decrypt_secret(self.password_encrypted)

    @password.setter
    def password(self, value: str) -> None:
        self.password_encrypted = encrypt_secret(value)

    @property
    def token(self) -> str:
        return decrypt_secret(self.token_encrypted)

    @token.setter
    def token(self, value: str) -> None:
        self.token_encrypted = encrypt_secret(value)

    @property
    def has_password(self) -> bool:
        return bool(self.password_encrypted)

    @property
    def has_token(self) -> bool:
        return bool(self.token_encrypted)


class RegisteredSubscription(models.Model):
    """A subscription the console was told about, for brokers whose inventory the
    console cannot list itself (a Pulsar cluster without an admin URL)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="registered")
    name = models.CharField(max_length=500)
    source = models.CharField(max_length=500)
    mode = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name", "source"], name="unique_registered_subscription"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.source}"
