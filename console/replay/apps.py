from django.apps import AppConfig


class ReplayConfig(AppConfig):
    """Replay engine: jobs that resend dead letters, their ledger, schedules."""

    name = "console.replay"
    label = "replay"
