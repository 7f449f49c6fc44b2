"""``simrun version``: the version of simrun and of its harness."""

from __future__ import annotations

import argparse

from harness import __version__

NAME = "version"
HELP = "print the version of simrun"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments."""


def run(args: argparse.Namespace) -> int:
    print(f"simrun {__version__}")
    return 0
