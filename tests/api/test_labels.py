"""The rule of a run's labels (``runs.common.labels``): the run page's check and the API's
serializer, both made of it, refuse the same words alike and keep the same ones."""

from __future__ import annotations

from typing import Any

import pytest

from runs.api.serializers import RunLabelsSerializer
from runs.common import labels

LONG = "x" * (labels.TAG_CHARS + 1)


def plain(errors: Any) -> Any:
    """DRF's errors with its ``ErrorDetail`` strings as plain ones."""
    if isinstance(errors, dict):
        return {key: plain(value) for key, value in errors.items()}
    return [str(message) for message in errors]


@pytest.mark.parametrize(
    ("words", "note"),
    [
        ([], ""),
        (["paper", "ising", "paper"], "  the run of figure 3 \n"),
        (["x" * labels.TAG_CHARS], "   "),
        (["fine", LONG, "a\x00b", LONG + "\x00"], "n"),
        ([str(n) for n in range(labels.MAX_TAGS)], "n" * labels.NOTE_CHARS),
        ([str(n) for n in range(labels.MAX_TAGS + 1)], "n" * (labels.NOTE_CHARS + 1)),
        ([*(str(n) for n in range(labels.MAX_TAGS)), LONG], "\x00" * (labels.NOTE_CHARS + 1)),
        (["ok"], " a\x00b "),
    ],
)
def test_the_page_and_the_api_refuse_and_keep_the_same_labels(words, note):
    given = RunLabelsSerializer(data={"tags": words, "note": note})
    valid = given.is_valid()
    assert labels.problems(words, note.strip()) == ({} if valid else plain(given.errors))
    if valid:
        assert given.validated_data == {"tags": words, "note": note.strip()}
