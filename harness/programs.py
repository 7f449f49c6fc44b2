"""What a command runs, by name: the key its memory is learnt by (docs/memory.md).

A program is named by its file's name; an interpreter by its script or module
(``python -m md.sim`` is ``python md.sim``, ``Rscript fit.R`` is ``Rscript fit.R``). A shell
given a line (``sh -c '…'``, ``bash -c '…'``) is named by what the line runs: the program of
its first command that is neither a setting (``X=1``, ``export``, ``cd``, ``set``…) nor a
wrapper (``exec``, ``env``, ``nice``…), so two scripts a shell starts are two programs, not
one ``sh``. A line that names nothing (only builtins, a variable, quotes left open) is
``<shell> -c``.
"""

from __future__ import annotations

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
    first = PurePosixPath(command[0]).name
    if first not in INTERPRETERS and not first.startswith(INTERPRETERS_TOO):
        return first
    args = list(command[1:])
    for index, arg in enumerate(args):
        if arg == "-m" and index + 1 < len(args):
            return f"{first} {args[index + 1]}"
        if _is_shell(first) and _line_flag(arg) and index + 1 < len(args):
            return shell_line_program(args[index + 1]) or f"{first} -c"
        if arg in ("-c", "-e"):
            return f"{first} {arg}"
        if not arg.startswith("-"):
            return f"{first} {PurePosixPath(arg).name}"
    return first


def shell_line_program(line: str) -> str | None:
    """The program a shell line runs (``program_name`` of its first working command); None
    when it names none."""
    for words in _commands(line):
        words = _unwrapped(words)
        if not words or words[0] in SETUP or not _names_a_program(words[0]):
            continue
        return program_name(words)
    return None


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
