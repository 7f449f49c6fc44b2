"""Programs and scripts a command names by a relative path, which no task can find.

Every task runs in an empty working directory (the scratch: a local process's, a pod's
``emptyDir``), where only its inputs are staged (``inputs/<port>/``). A command
``[./sim, …]``, ``[bin/sim, …]`` or ``[python, relax.py, …]`` would look there and fail, or
worse, find nothing and fail in every unit: it is refused when the run is submitted, at the
argument, saying where a program must be. What names the program is judged: the command's
first argument when it holds a ``/``, and the script an interpreter runs (its first
argument that is neither an option nor an option's value, with a script's suffix), unless
``-c``, ``-m`` or ``-e`` comes first (then it is code or a module, no file).
"""

from __future__ import annotations

from collections.abc import Sequence

INTERPRETERS = frozenset(
    {"python", "python3", "Rscript", "julia", "perl", "ruby", "node", "sh", "bash"}
)
"""Programs whose first argument that is no option is a script file."""
SCRIPT_SUFFIXES = (".py", ".R", ".r", ".jl", ".pl", ".rb", ".js", ".mjs", ".sh", ".bash")
CODE_OPTIONS = frozenset({"-c", "-m", "-e", "--eval", "--expr", "-E"})
"""An interpreter's options after which its arguments are code or a module, not a file."""
STAGED = "inputs/"


def relative_program(command: Sequence[str]) -> tuple[int, str] | None:
    """The index and text of the argument of ``command`` that names a program or script by a
    relative path outside its staged inputs; None when it names none so."""
    if not command:
        return None
    program = command[0]
    if _relative(program, "/" in program):
        return 0, program
    name = program.rsplit("/", 1)[-1]
    if name not in INTERPRETERS and not name.startswith("python3."):
        return None
    for index, arg in enumerate(command[1:], start=1):
        if arg in CODE_OPTIONS:
            return None
        script = arg.endswith(SCRIPT_SUFFIXES)
        if arg.startswith("-") or (not script and command[index - 1].startswith("-")):
            continue  # an option, or its value (python -X dev fit.py)
        return (index, arg) if _relative(arg, script) else None
    return None


def _relative(arg: str, names_a_file: bool) -> bool:
    return names_a_file and not arg.startswith(("/", STAGED, "~")) and "{" not in arg


def relative_problem(arg: str) -> str:
    """Why a program named by a relative path is refused, and what to write instead."""
    return (
        f"{arg!r} is a relative path: a task runs in an empty working directory (its scratch), "
        "where only its inputs are staged (inputs/<port>/), so no program or script is found "
        "there by it; give its absolute path on the machine that runs it (its content is then "
        "part of the task's key, docs/resume.md), ship it in `sources` and run it as a "
        "module (python -m) or console script, or stage it as an input"
    )
