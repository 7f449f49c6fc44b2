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

What a shell line runs is told once, by ``shell_line_commands``: its simple commands in
order, each with the folder its ``cd``s lead to and the files it reads by ``<``. The learning
here names a line by its first working command; a task's key (``runs.planning.programs``)
reads every program and file the line names, so an edited script under ``sh -c`` is another
task.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
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
REDIRECTION = re.compile(r"&?(>>?|>[&|]|<&|<>)")
"""An output (or descriptor) redirection: the word after it is what the command writes."""
READ = "<"
"""The input redirection: the word after it is a file the command reads."""
HERE = frozenset({"<<", "<<<", "<<-"})
"""Here-documents and here-strings: the word after them is text, not a file."""


@dataclass(frozen=True)
class LineCommand:
    """One simple command of a shell line.

    ``words``: the command without its leading assignments, wrappers (``exec``, ``env``,
    ``nice``…) and redirections; ``folder``: the absolute folder it runs in as the line's
    ``cd``s say it (None: where the line starts, or a folder not known without the machine);
    ``reads``: the files given to it by ``<``.
    """

    words: tuple[str, ...]
    folder: str | None
    reads: tuple[str, ...] = ()


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


def shell_line_index(command: Sequence[str]) -> int | None:
    """The index of the line a shell command runs (``sh -c LINE``, ``bash -lc LINE``); None
    when ``command`` is not a shell given a line."""
    if not command or not _is_shell(PurePosixPath(command[0]).name):
        return None
    for index, arg in enumerate(command[1:], start=1):
        if _line_flag(arg):
            return index + 1 if index + 1 < len(command) else None
        if not arg.startswith("-"):
            return None
    return None


def shell_line_commands(line: str) -> list[LineCommand]:
    """What a shell line runs: its simple commands in order (``;``, ``&&``, ``|``, new lines
    and brackets split them), each with the folder it runs in, following the line's ``cd``s
    (a ``cd`` to an absolute folder, or a relative one from a known folder); none when the
    line cannot be split (quotes left open)."""
    found: list[LineCommand] = []
    folder: str | None = None
    for words in _commands(line):
        plain, reads = _redirected(words)
        plain = _unwrapped(plain)
        found.append(LineCommand(tuple(plain), folder, tuple(reads)))
        if plain and plain[0] == "cd":
            folder = _absolute(plain[1], folder, bare=True) if len(plain) == 2 else None
    return found


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
    for command in shell_line_commands(line):
        words = command.words
        if not words or words[0] in SETUP or not _names_a_program(words[0]):
            continue
        return _program(words, command.folder)
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


def _redirected(words: list[str]) -> tuple[list[str], list[str]]:
    """A command's words without its redirections, and the files it reads by ``<``. What a
    redirection writes is no part of it (nor the descriptor number before it: ``2>``)."""
    plain: list[str] = []
    reads: list[str] = []
    skip = False
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else ""
        if skip:
            skip = False
        elif word == READ or word in HERE or REDIRECTION.fullmatch(word):
            skip = True
            if word == READ and following:
                reads.append(following)
        elif not (word.isdigit() and (following == READ or REDIRECTION.fullmatch(following))):
            plain.append(word)
    return plain, reads


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
