"""What a command runs, by name and by path: the key its memory is learnt by (docs/memory.md).

A program is named by its file's name; an interpreter by its script or module
(``python -m md.sim`` is ``python md.sim``, ``Rscript fit.R`` is ``Rscript fit.R``). A shell
given a line (``sh -c '…'``, ``bash -c '…'``) is named by what the line runs: the program of
its first command that is neither a setting (``X=1``, ``export``, ``cd``, ``set``…) nor a
wrapper (``exec``, ``env``, ``nice``…), so two scripts a shell starts are two programs, not
one ``sh``. A line that names nothing (only builtins, a variable, quotes left open) is
``<shell> -c``.

Two files of one name (two projects' ``run.sh``) are told apart by ``program_path``: the
absolute path of the file the name is taken from, when the command says it (an absolute
path, or a relative one in a shell line after ``cd`` to an absolute folder); None for a
program found on ``PATH``, a module, code, or a file whose folder is not known.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

INTERPRETERS = frozenset(
    {"python", "python3", "Rscript", "julia", "perl", "ruby", "node", "sh", "dash", "zsh", "ksh"}
)
INTERPRETERS_TOO = ("python3.", "bash")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
WRAPPERS = frozenset({"exec", "env", "time", "nice", "nohup", "command", "stdbuf", "ionice"})
"""Words that run the command after them (their own options skipped)."""
SETUP = frozenset(
    {
        "cd", "export", "set", "unset", "source", ".", "true", ":", "umask", "ulimit", "trap",
        "echo", "printf", "mkdir", "test", "[", "shift", "local", "wait", "exit", "cp", "ln",
    }
)  # fmt: skip
"""Commands that prepare or report around the work, never the work itself."""
OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&"})
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def program_name(command: Sequence[str]) -> str:
    """The name a command's memory is learnt by (see the module)."""
    return _program(command, None)[0]


def program_path(command: Sequence[str]) -> str | None:
    """The absolute path of the file ``program_name`` names, when the command says it (see
    the module); None otherwise."""
    return _program(command, None)[1]


def shell_line_program(line: str) -> str | None:
    """The program a shell line runs (``program_name`` of its first working command); None
    when it names none."""
    found = _shell_line(line)
    return found[0] if found else None


def _program(command: Sequence[str], folder: str | None) -> tuple[str, str | None]:
    """The name and path of what ``command`` runs, run in ``folder`` (None: not known)."""
    first = PurePosixPath(command[0]).name
    if first not in INTERPRETERS and not first.startswith(INTERPRETERS_TOO):
        return first, _absolute(command[0], folder, bare=False)
    args = list(command[1:])
    for index, arg in enumerate(args):
        if arg == "-m" and index + 1 < len(args):
            return f"{first} {args[index + 1]}", None
        if _is_shell(first) and _line_flag(arg) and index + 1 < len(args):
            return _shell_line(args[index + 1]) or (f"{first} -c", None)
        if arg in ("-c", "-e"):
            return f"{first} {arg}", None
        if not arg.startswith("-"):
            return f"{first} {PurePosixPath(arg).name}", _absolute(arg, folder, bare=True)
    return first, None


def _shell_line(line: str) -> tuple[str, str | None] | None:
    """The name and path of the first working command of a shell line, following its ``cd``s
    to know the folder it runs in; None when it names none."""
    folder: str | None = None
    for words in _commands(line):
        words = _unwrapped(words)
        if words and words[0] == "cd":
            folder = _absolute(words[1], folder, bare=True) if len(words) == 2 else None
            continue
        if not words or words[0] in SETUP or not _names_a_program(words[0]):
            continue
        return _program(words, folder)
    return None


def _absolute(path: str, folder: str | None, *, bare: bool) -> str | None:
    """``path`` made absolute against ``folder``; None when it cannot be told without the
    machine: a placeholder or variable in it, an unknown folder, or (unless ``bare``, as a
    script an interpreter opens) a name without ``/``, which the shell looks up on ``PATH``."""
    if "{" in path or "$" in path or path.startswith("~") or not (bare or "/" in path):
        return None
    if path.startswith("/"):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(folder, path)) if folder else None


def _is_shell(name: str) -> bool:
    return name in SHELLS or name.startswith("bash")


def _line_flag(arg: str) -> bool:
    """Whether a shell's argument makes the next one its line: ``-c``, or flags with it
    (``-ec``, ``-lc``)."""
    return arg[:1] == "-" and arg[1:2] != "-" and "c" in arg[1:]


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line, in order; none when it cannot be split."""
    lexer = shlex.shlex(line.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # quotes left open
        return []
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in OPERATORS or set(token) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _unwrapped(words: list[str]) -> list[str]:
    """A command without its leading assignments, wrappers and the wrappers' options."""
    index = 0
    while index < len(words):
        word = words[index]
        option = word[:1] == "-" or word.isdigit()
        if ASSIGNMENT.match(word) or word in WRAPPERS or (option and _wrapped(words, index)):
            index += 1
        else:
            break
    return words[index:]


def _wrapped(words: list[str], index: int) -> bool:
    """Whether the word at ``index`` follows a wrapper, past its options so far."""
    while index > 0:
        index -= 1
        if words[index] in WRAPPERS:
            return True
        if not (words[index][:1] == "-" or words[index].isdigit()):
            return False
    return False


PROGRAM = re.compile(r"[A-Za-z_./~][\w./+~-]*")


def _names_a_program(word: str) -> bool:
    """Whether a word is a program's name: not a variable, a redirection, a placeholder or a
    fragment of an expression."""
    return PROGRAM.fullmatch(word) is not None
