"""What the README and docs/ tell a new user is what the code does."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.tasktypes import input_names, registered_types
from runs.cli import parser, serve

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_names_every_option_of_serve():
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    readme = (ROOT / "README.md").read_text()
    missing = [o for o in options if o != "--help" and o not in readme]
    assert not missing, f"README.md does not mention {missing}"


def test_run_spec_says_a_type_without_history_learns_from_the_other_types():
    text = (ROOT / "docs" / "run-spec.md").read_text()
    planning = text.split("## Planning", 1)[1].split("\n## ", 1)[0]
    assert "without history" in planning and "other types" in planning
    assert "memory.md" in planning
    assert not re.search(r"else from the type's default", text)


CLIENT_COMMANDS = ("login", "submit", "runs", "show", "logs", "results", "cancel")


def test_cli_md_names_every_option_of_the_client_commands():
    """Each option, in one of its forms (``-n`` or ``--tail``), on a line that names the
    command (its row of the table, its examples)."""
    commands = next(
        a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    doc = (ROOT / "docs" / "cli.md").read_text().splitlines()
    missing = []
    for name in CLIENT_COMMANDS:
        rows = "\n".join(line for line in doc if f"simrun {name}" in line)
        for action in commands[name]._actions:
            forms = [o for o in action.option_strings if o not in {"-h", "--help"}]
            if forms and not any(re.search(rf"{re.escape(o)}\b", rows) for o in forms):
                missing.append(f"simrun {name} {'/'.join(forms)}")
    assert not missing, f"docs/cli.md does not mention {missing}"


def test_run_spec_names_every_setting_of_the_built_in_types_in_their_rows():
    text = (ROOT / "docs" / "run-spec.md").read_text()
    doc = text.split("### Built-in task types", 1)[1].split("\n#", 1)[0].splitlines()
    missing = []
    for name, task_type in registered_types().items():
        row = next((line for line in doc if line.startswith(f"| `{name}` |")), None)
        if row is None:
            continue  # a type the table does not list (sweep: its own section)
        missing += [f"{name}.{s}" for s in input_names(task_type.settings) if f"`{s}`" not in row]
    assert not missing, f"docs/run-spec.md does not name {missing}"
