from django.apps import AppConfig


class AnalyticsConfig(AppConfig):
    """Dead-letter analytics: archive export to Parquet, Spark jobs, summary dashboard."""

    name = "console.analytics"
    label = "analytics"
