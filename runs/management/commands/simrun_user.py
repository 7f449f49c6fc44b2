"""``manage.py simrun_user NAME``: create a user (or find one) and print an API token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.cli.user import ensure_user


class Command(BaseCommand):
    help = "Create a user of the service (or find one) and print an API token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--staff", action="store_true", help="sees every run")
        parser.add_argument("--password", help="set this password (else a generated one)")

    def handle(self, *args: Any, **options: Any) -> None:
        login = ensure_user(
            name=options["name"], staff=options["staff"], password=options["password"]
        )
        if login.password is not None:
            self.stdout.write(f"password: {login.password}")
        self.stdout.write(f"token: {login.token}")
