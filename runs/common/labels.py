"""What an owner files a run under: its tags (words to find it by) and its note.

The rule is stated once, here: the API's ``RunLabelsSerializer`` is declared from it, the run
page checks its form with ``problems``, which says what the serializer says of the same
words, and a tag the runs list filters by is as long as a tag may be.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TAG_CHARS = 50
MAX_TAGS = 20
NOTE_CHARS = 5000
TAG = rf"^[^\s,]{{1,{TAG_CHARS}}}$"
"""A tag: a word without spaces or commas, the separators of the page's form."""
TAG_RULE = f"a word of 1 to {TAG_CHARS} characters"

# DRF's words for the same limits: the page says what the API answers.
TOO_MANY_TAGS = f"Ensure this field has no more than {MAX_TAGS} elements."
NOTE_TOO_LONG = f"Ensure this field has no more than {NOTE_CHARS} characters."
NULL_CHARACTERS = "Null characters are not allowed."

Problems = dict[str, list[str] | dict[int, list[str]]]
"""A field's problems, a list's by the position of each bad item, as DRF reports them."""


def problems(tags: Sequence[str], note: str) -> Problems:
    """What keeps ``tags`` and ``note`` from being a run's labels, by field; empty when
    nothing does. The tags are words as a form splits them (none blank, no surrounding
    space), the note as it is saved (stripped): the problems of each bad tag by its
    position, else too many tags, and the note's."""
    found: Problems = {}
    bad = {index: tag_problems(tag) for index, tag in enumerate(tags)}
    if bad := {index: said for index, said in bad.items() if said}:
        found["tags"] = bad
    elif len(tags) > MAX_TAGS:
        found["tags"] = [TOO_MANY_TAGS]
    said = [NOTE_TOO_LONG] if len(note) > NOTE_CHARS else []
    if "\x00" in note:
        said.append(NULL_CHARACTERS)
    if said:
        found["note"] = said
    return found


def kept_tags(tags: Sequence[str]) -> list[str]:
    """The tags a run keeps of ``tags``: each once, in the order first given."""
    return list(dict.fromkeys(tags))


def tag_problems(tag: str) -> list[str]:
    """What is wrong with a tag, in DRF's order (its characters, then its form)."""
    said = [NULL_CHARACTERS] if "\x00" in tag else []
    if not re.search(TAG, tag):
        said.append(TAG_RULE)
    return said
