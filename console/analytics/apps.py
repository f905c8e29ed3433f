from __future__ import annotations

from django.apps import AppConfig

# What each role may do with the analytics pages (console.accounts.roles merges these).
ANALYTICS_ROLE_PERMISSIONS = {
    "viewer": ["analytics.view_pipelinerun"],
    "operator": ["analytics.run_pipeline"],
    "admin": [],
}


class AnalyticsConfig(AppConfig):
    """Dead-letter analytics: archive export to Parquet, Spark jobs, summary dashboard."""

    name = "console.analytics"
    label = "analytics"

    def ready(self) -> None:
        from console.accounts.roles import EXTRA_ROLE_PERMISSIONS

        for role, permissions in ANALYTICS_ROLE_PERMISSIONS.items():
            for permission in permissions:
                if permission not in EXTRA_ROLE_PERMISSIONS[role]:
                    EXTRA_ROLE_PERMISSIONS[role].append(permission)
