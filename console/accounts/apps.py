from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "console.accounts"
    label = "accounts"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from console.accounts.roles import sync_role_groups

        post_migrate.connect(sync_role_groups, dispatch_uid="redrive-sync-role-groups")
