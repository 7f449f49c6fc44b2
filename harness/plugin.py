"""The command of a plugin type a run's sources ship: ``python -m harness.plugin``.

The service knows such a type by name only (``harness.tasktypes.ShippedType``), so the pod's
``simrun-exec`` runs this module instead of the type's command. After the sources are
installed it finds the type, asks it for the command of the task's settings (``task.json``)
and replaces itself with that command: the same process, so ``simrun-exec`` passes SIGTERM on
to it and measures it as its child. A command starting with ``python`` runs in this
interpreter, as ``simrun-exec`` runs one.
"""

from __future__ import annotations

import os
import sys

from harness import config
from harness.errors import EXIT_CONFIGURATION, ConfigurationError
from harness.execute import PYTHON
from harness.tasktypes import get_task_type


def command_of_task(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """The command of the task of ``env``: its type's for the settings of ``task.json``."""
    task = config.read_task(config.paths_from_env(env))
    task_type = get_task_type(task.type)
    if task_type.command is None:
        raise ConfigurationError(f"task type {task.type!r} is no plugin type: it has no command")
    command = task_type.command(task_type.settings_or_error(task.settings))
    if not command:
        raise ConfigurationError(f"task type {task.type!r} gives an empty command")
    return [sys.executable, *command[1:]] if command[0] in PYTHON else list(command)


def main() -> int:
    """Replace this process with the command of the task; 4 when there is none."""
    try:
        argv = command_of_task(os.environ)
    except ConfigurationError as error:
        print(f"simrun plugin: {error}", file=sys.stderr)
        return EXIT_CONFIGURATION
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        print(f"simrun plugin: the command {argv[0]} cannot be started: {error}", file=sys.stderr)
    return EXIT_CONFIGURATION


if __name__ == "__main__":
    raise SystemExit(main())
