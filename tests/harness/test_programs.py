"""What a command runs, by name: the key its memory is learnt by (harness.programs)."""

from __future__ import annotations

import pytest

from harness.programs import program_name, program_path

NAMES = {
    "a program by its file": (["/opt/bin/md-sim", "{x}"], "md-sim"),
    "a module": (["python", "-m", "md.relax"], "python md.relax"),
    "a script": (["Rscript", "fit/model.R", "{x}"], "Rscript model.R"),
    "a shell's script file": (["bash", "run.sh"], "bash run.sh"),
    "a shell line's script": (["sh", "-c", './a.sh "$1"', "sh", "{i}"], "a.sh"),
    "another script": (["sh", "-c", './b.sh "$1"', "sh", "{i}"], "b.sh"),
    "flags with -c": (["bash", "-lc", "exec ./sim {x}"], "sim"),
    "past settings and wrappers": (
        ["sh", "-c", "cd w && X=1 env -i nice -n 5 /opt/heavy {x} > o 2>&1"],
        "heavy",
    ),
    "an interpreter in the line": (
        ["sh", "-ec", "mkdir -p o\npython3 -m md.run {x}"],
        "python3 md.run",
    ),
    "only builtins": (["sh", "-c", 'echo "$1" >&2; [ $(( $1 % 2 )) = 0 ]'], "sh -c"),
    "a variable": (["sh", "-c", '"$PROGRAM" {x}'], "sh -c"),
    "quotes left open": (["sh", "-c", "'open"], "sh -c"),
}


@pytest.mark.parametrize(("command", "name"), NAMES.values(), ids=NAMES.keys())
def test_a_command_is_named_by_what_it_runs(command, name):
    assert program_name(command) == name


PATHS = {
    "a program by its absolute path": (["/opt/bin/md-sim", "{x}"], "/opt/bin/md-sim"),
    "a program on PATH": (["md-sim", "{x}"], None),
    "a module": (["python", "-m", "md.relax"], None),
    "a script by its absolute path": (["bash", "/p1/./run.sh"], "/p1/run.sh"),
    "a script in an unknown folder": (["bash", "run.sh"], None),
    "a shell line's absolute script": (["sh", "-c", '/p2/run.sh "$1"', "sh", "{i}"], "/p2/run.sh"),
    "a shell line's script after cd": (
        ["sh", "-c", 'cd /p1 && cd work && ../run.sh "$1"', "sh", "{i}"],
        "/p1/run.sh",
    ),
    "a script an interpreter opens after cd": (["sh", "-c", "cd /p1; bash run.sh"], "/p1/run.sh"),
    "a bare name after cd is looked up on PATH": (["sh", "-c", "cd /p1; run.sh"], None),
    "a relative script without cd": (["sh", "-c", './a.sh "$1"', "sh", "{i}"], None),
    "cd to a variable": (["sh", "-c", 'cd "$HOME" && ./run.sh'], None),
    "cd to a placeholder": (["sh", "-c", "cd /p/{i} && ./run.sh"], None),
    "only builtins": (["sh", "-c", 'echo "$1" >&2'], None),
}


@pytest.mark.parametrize(("command", "path"), PATHS.values(), ids=PATHS.keys())
def test_two_files_of_one_name_are_told_apart_by_their_path(command, path):
    assert program_path(command) == path
