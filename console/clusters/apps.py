from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "console.clusters"
    label = "clusters"
