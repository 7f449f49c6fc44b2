"""What the command line prints of what a task wrote, made inert for a terminal.

A task writes its logs, its results table, its failure message and the names of its files; a
terminal acts on control sequences in them (set the clipboard, change the title, clear the
screen, move the cursor over what was printed) and reorders text at bidirectional overrides.
Every answer the CLI's client receives is passed through ``inert`` before a command sees it,
so no command can print such a sequence whatever it prints; the Python client keeps the
true text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides."""


def inert(text: str) -> str:
    """``text`` without what a terminal would act on; a CRLF line ending read as a newline."""
    return CONTROL.sub("", text.replace("\r\n", "\n"))


def inert_data(value: Any) -> Any:
    """A JSON document with each string (keys too) made ``inert``."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, list):
        return [inert_data(item) for item in value]
    if isinstance(value, dict):
        return {inert(str(key)): inert_data(item) for key, item in value.items()}
    return value


def inert_response(response: httpx.Response) -> httpx.Response:
    """The answer with its text made inert: JSON string by string, any other text whole.
    A binary answer (a Parquet file) is left as it is: no command prints it."""
    kind = response.headers.get("content-type", "")
    if "json" in kind:
        try:
            body = json.dumps(inert_data(response.json())).encode()
        except ValueError:
            body = inert(response.text).encode()
    elif kind.startswith("text/") or not kind:
        body = inert(response.text).encode(response.encoding or "utf-8", errors="replace")
    else:
        return response
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return httpx.Response(
        response.status_code, headers=headers, content=body, request=response.request
    )
