"""``manage.py simrun_user NAME``: create a user (or find one) and print an API token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.cli import user


class Command(BaseCommand):
    help = user.HELP

    def add_arguments(self, parser: CommandParser) -> None:
        user.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        login = user.ensure_user(
            name=options["name"],
            staff=options["staff"],
            password=options["password"],
            login=options["login"],
        )
        self.stdout.write(user.printed(login))
