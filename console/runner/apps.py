from django.apps import AppConfig


class RunnerConfig(AppConfig):
    """The embedded set-up: run command, default clusters, demo traffic."""

    name = "console.runner"
    label = "runner"
