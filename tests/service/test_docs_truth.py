"""What the README and docs/ tell a new user is what the code does."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from runs.cli import serve

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
