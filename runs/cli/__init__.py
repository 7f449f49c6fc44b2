"""The ``simrun`` command: each subcommand is a module of this package.

A subcommand module has ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
Client subcommands talk to the REST API only; ``serve`` and ``render-workflow`` start Django
themselves, so ``simrun --help`` works without the service installed. A top room: it may
import the client, and the service's rooms inside those subcommands, but nothing of ``web``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from types import ModuleType

SUBCOMMANDS = [
    "runs.cli.version",
    "runs.cli.render_workflow",
    "runs.cli.serve",
    "runs.cli.user",
    "runs.cli.login",
    "runs.cli.submit",
    "runs.cli.runs",
    "runs.cli.show",
    "runs.cli.logs",
    "runs.cli.results",
    "runs.cli.cancel",
    "runs.cli.tag",
    "runs.cli.note",
]


def _modules(command: str | None = None) -> list[ModuleType]:
    """The subcommands' modules: only ``command``'s when it names one (``serve`` starts
    without importing the client's, a few hundred milliseconds on its way to its first
    answer), else all of them (``--help``, a command mistyped)."""
    name = f"runs.cli.{(command or '').replace('-', '_')}"
    if name in SUBCOMMANDS and getattr(module := import_module(name), "NAME", None) == command:
        return [module]
    return [import_module(name) for name in SUBCOMMANDS]


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of the ``simrun`` command; of ``command`` alone when it is given and known."""
    top = argparse.ArgumentParser(
        prog="simrun", description="Run simulation workflows: sweeps, plugins and commands."
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _modules(command):
        sub = commands.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
