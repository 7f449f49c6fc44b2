"""How the service writes its log: a line per record as key=value pairs, with the run it is about.

``run=`` comes from ``extra={"run": ...}``, else from the message's own ``run %s``, so the
lines of one run can be found with ``grep run=ID``. Chatty libraries' warnings (kombu's,
Python's) are let through once per process: an operator sees each once, not every poll.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

STANDARD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
"""What every record has; anything else a call passed in ``extra`` becomes a pair."""
SPECIFIER = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[a-zA-Z%]")
PLAIN = re.compile(r"^[\w.:/@+-]+$")
ONCE_REMEMBERED = 10_000
"""Distinct warnings a process remembers having shown; past that it shows them again."""


def quoted(value: Any) -> str:
    """A value as it reads in a key=value line: bare when it is one plain word, else JSON."""
    text = value if isinstance(value, str) else str(value)
    return text if PLAIN.match(text) else json.dumps(text, ensure_ascii=False)


def run_of(record: logging.LogRecord) -> str | None:
    """The run a record is about: its ``run`` extra, or the argument after "run " in its text."""
    if run := getattr(record, "run", None):
        return str(run)
    if not isinstance(record.msg, str) or not isinstance(record.args, tuple):
        return None
    index = 0
    for match in SPECIFIER.finditer(record.msg):
        if match.group() == "%%":
            continue
        if record.msg[: match.start()].endswith("run ") and index < len(record.args):
            return str(record.args[index])
        index += 1
    return None


class KeyValueFormatter(logging.Formatter):
    """``time=… level=… logger=… run=… msg="…"`` then the record's extra pairs."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        pairs: dict[str, Any] = {
            "time": at.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
        }
        if run := run_of(record):
            pairs["run"] = run
        pairs["msg"] = record.getMessage()
        for key, value in vars(record).items():
            if key not in STANDARD_ATTRIBUTES and key != "run":
                pairs[key] = value
        line = " ".join(f"{key}={quoted(value)}" for key, value in pairs.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class Once(logging.Filter):
    """Lets a record of the named loggers through once per process (by logger and text)."""

    def __init__(self, prefixes: Iterable[str] = ("kombu", "py.warnings")) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(self.prefixes):
            return True
        key = (record.name, record.getMessage())
        if key in self.seen:
            return False
        if len(self.seen) >= ONCE_REMEMBERED:
            self.seen.clear()
        self.seen.add(key)
        return True
