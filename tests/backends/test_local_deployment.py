"""The compose deployment runs every process ``simrun serve`` runs, with the same commands."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import yaml

from runs.cli.serve import children

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"
OPTIONS_WITH_VALUES = {"--app", "-A"}


def program(argv: list[str]) -> tuple[str, str]:
    """What a command runs, whatever its options: (tool, its subcommand or application)."""
    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2].rpartition("exec ")[2])
    words = list(argv)
    while words and (words[0].endswith(("python", "python3")) or words[0] == "-m"):
        words.pop(0)
    tool = "django" if words[0] in {"manage.py", "django"} else Path(words[0]).name
    rest = iter(words[1:])
    for word in rest:
        if word in OPTIONS_WITH_VALUES:
            next(rest)
        elif not word.startswith("-"):
            return tool, word
    return tool, ""


def test_each_process_of_serve_has_its_compose_service_with_the_same_command():
    args = argparse.Namespace(host="0.0.0.0", port=8000, web_workers=3)
    found = children(args, stepped=True, home=Path("/srv/simrun"))
    served = {child.name: program(child.argv) for child in found}
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    composed = {name: program(s["command"]) for name, s in services.items() if "command" in s}

    assert served == {
        "web": ("gunicorn", "simrun_site.asgi:application"),
        "worker": ("celery", "worker"),
        "learner": ("celery", "worker"),
        "beat": ("celery", "beat"),
        "steps": ("django", "simrun_steps"),
    }
    for name, command in served.items():
        assert composed.get(name) == command, f"compose has no {name} running {command}"
    learner = next(child for child in found if child.name == "learner")
    assert learner.argv[-1].startswith("simrun-learner-")
    assert services["learner"]["command"][-2:] == ["-Q", "learning"]
    assert learner.argv[learner.argv.index("-Q") + 1] == "learning"
