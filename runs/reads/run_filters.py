"""The filters of the runs list, read from a query string and validated like a body.

The API's list and the runs page take the same filters and say the same of a bad one: both
validate them with ``RunFilters``, DRF's fields used as a validator, whose words are those
the API's 400 has always given; the API's schema lists its parameters from it too.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q, Subquery
from django.http import QueryDict
from rest_framework import serializers

from runs.common import labels
from runs.common.errors import field_sentences
from runs.models import RunQuerySet, RunState, Task

DATE_FORMATS = ["iso-8601", "%Y-%m-%d"]
PARAMETER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,99}")
NO_VALUE = object()
"""A ``param`` without a value: any run with the parameter."""


class RunFilters(serializers.Serializer[dict[str, Any]]):
    """Query parameters of ``GET /api/runs/``; all optional, combined with AND."""

    state = serializers.MultipleChoiceField(
        choices=RunState.choices, required=False, help_text="one or more states (repeat it)"
    )
    owner = serializers.CharField(
        required=False, max_length=150, help_text="the owner's username (useful for staff)"
    )
    name = serializers.CharField(
        required=False, max_length=200, help_text="part of the run's name, any case"
    )
    created_after = serializers.DateTimeField(
        required=False, input_formats=DATE_FORMATS, help_text="created at or after (date or time)"
    )
    created_before = serializers.DateTimeField(
        required=False, input_formats=DATE_FORMATS, help_text="created before (date or time)"
    )
    live = serializers.BooleanField(
        required=False, allow_null=True, default=None, help_text="only live (or only ended) runs"
    )
    tag = serializers.ListField(
        child=serializers.CharField(max_length=labels.TAG_CHARS),
        required=False,
        max_length=10,
        help_text="runs filed under this tag (repeat it: under every one)",
    )
    param = serializers.CharField(
        required=False,
        max_length=200,
        help_text="runs with a task of this parameter (NAME), or of this value of it "
        "(NAME=VALUE): a sweep's axis listing the value or whose range or linspace spans "
        "it, or a task setting equal to it",
    )

    def validate_param(self, text: str) -> tuple[str, Any]:
        name, equals, raw = text.partition("=")
        name = name.strip()
        if not PARAMETER.fullmatch(name) or "__" in name:
            raise serializers.ValidationError("NAME or NAME=VALUE, NAME a parameter's name")
        return name, (scalar(raw.strip()) if equals else NO_VALUE)


FIELDS = tuple(RunFilters().fields)


def scalar(text: str) -> Any:
    """A parameter's value as a query gives it: a JSON number or literal, else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | str | bool) else text


def with_parameter(name: str, value: Any) -> Q:
    """Runs with a task of a parameter, or of a value of it: a sweep's axis listing it or
    whose ``range`` or ``linspace`` spans it (its grid's points are not matched one by
    one), or a task setting equal to it."""
    axis = f"settings__sweep__{name}"
    if value is NO_VALUE:
        found = Q(settings__sweep__has_key=name) | Q(settings__has_key=name)
    else:
        found = Q(**{f"{axis}__contains": [value]}) | Q(**{f"settings__{name}": value})
        if isinstance(value, int | float) and not isinstance(value, bool):
            found |= Q(**{f"{axis}__linspace__0__lte": value, f"{axis}__linspace__1__gte": value})
            found |= Q(**{f"{axis}__range__0__lte": value, f"{axis}__range__1__gt": value})
    return Q(Exists(Task.objects.filter(found, run=OuterRef("pk"))))


Asked = tuple[tuple[str, tuple[str, ...]], ...]


def filter_values(query: QueryDict) -> tuple[dict[str, Any], dict[str, Any]]:
    """The validated filters of a query string and the errors by parameter (one is empty).

    No parameters, nothing to validate: the lists' commonest request skips the serializer.
    Validating is a function of the filters' parameters alone: a process validates each
    combination of them once (the serializer cost a tenth of a filtered list).
    """
    if not query:
        return {}, {}
    # An empty value is no filter: the page's form sends every field, "any state" as "".
    given = ((name, tuple(v for v in query.getlist(name) if v)) for name in FIELDS)
    asked = tuple((name, values) for name, values in given if values)
    values, errors = validated(asked)
    return dict(values), dict(errors)


@lru_cache(maxsize=1024)
def validated(asked: Asked) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filters' values (a set of states frozen) and errors of ``asked``, its parameters
    by name with their values as given."""
    data = QueryDict(mutable=True)
    for name, given in asked:
        data.setlist(name, list(given))
    filters = RunFilters(data=data)
    if not filters.is_valid():
        return {}, {name: field_sentences(errors) for name, errors in filters.errors.items()}
    values = dict(filters.validated_data)
    if "state" in values:
        values["state"] = frozenset(values["state"])
    return values, {}


def apply_filters(runs: RunQuerySet, values: dict[str, Any]) -> RunQuerySet:
    """Narrow runs by validated filter values (shared by the API and the dashboard)."""
    if values.get("state"):
        runs = runs.filter(state__in=sorted(values["state"]))
    if values.get("owner"):
        # The owner's id found first (a subquery), so runs are read by their owner index.
        owner = get_user_model().objects.filter(username=values["owner"]).values("pk")[:1]
        runs = runs.filter(owner=Subquery(owner))
    if values.get("name"):
        # Served on PostgreSQL by a GIN index of the owner and UPPER(name)'s trigrams (0013).
        runs = runs.filter(name__icontains=values["name"])
    if values.get("created_after"):
        runs = runs.filter(created_at__gte=values["created_after"])
    if values.get("created_before"):
        runs = runs.filter(created_at__lt=values["created_before"])
    for tag in values.get("tag", ()):
        runs = runs.filter(tags__contains=[tag])
    if values.get("param"):
        runs = runs.filter(with_parameter(*values["param"]))
    if values.get("live") is True:
        runs = runs.live()
    elif values.get("live") is False:
        runs = runs.settled()
    return runs
