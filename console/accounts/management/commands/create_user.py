"""manage.py create_user NAME --role operator [--password P] [--token]"""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from console.accounts.roles import ROLES
from console.accounts.services import user_create_with_role, user_token_issue


class Command(BaseCommand):
    help = "Create a console user with a role (viewer, operator, admin); optionally print an API token."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", help="read from the terminal when left out")
        parser.add_argument("--email", default="")
        parser.add_argument("--token", action="store_true", help="issue and print an API token")

    def handle(self, *args, **options) -> None:
        password = options["password"]
        if password is None:
            password = getpass.getpass("Password: ")
        if not password:
            raise CommandError("a password is required")
        user = user_create_with_role(
            username=options["username"], password=password, role=options["role"],
            email=options["email"],
        )
        self.stdout.write(f"user {user.username} has role {options['role']}")
        if options["token"]:
            self.stdout.write(f"token {user_token_issue(user=user)}")
