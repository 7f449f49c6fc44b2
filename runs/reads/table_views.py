"""Views of a results table: its rows filtered by an expression on its columns, and averaged
over an axis (a seed): what a scientist asks of a sweep before plotting it.

The filter is a small language, parsed here and never evaluated as code: clauses
``<column> <op> <value>`` joined by ``and``, an op one of ``= == != < <= > >= ~`` (``~``: the
cell contains the text). A column is a name (letters, digits, ``_ . -``) or any text in
backticks; a value is a number, a quoted text or a bare word. Numbers compare as numbers in a
numeric column, anything else as text.

The average over an axis groups the rows by the other parameters and gives, for each numeric
result field, its ``mean``, ``std`` (the sample's, empty for one row), ``min`` and ``max``,
with the ``n`` of rows averaged. A view is a new ``Results``, kept on the table it came from
(``VIEWS_KEPT`` of them) so that sorting, paging and plotting it again costs what they cost
on any table.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from runs.reads.results import MISSING, Results, numeric_columns

FILTER_CHARS = 500
"""An expression longer than this is refused: a filter is typed, not generated."""
CLAUSES = 20
VIEWS_KEPT = 16
"""Views kept per table, the least recently made dropped first."""
OPS = ("==", "!=", "<=", ">=", "=", "<", ">", "~")
TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|<=|>=|=|<|>|~)|`(?P<quoted_name>[^`]*)`|\"(?P<dq>[^\"]*)\""
    r"|'(?P<sq>[^']*)'|(?P<word>[^\s=!<>~`\"']+))"
)
STATS = ("mean", "std", "min", "max")


class BadView(ValueError):
    """A filter or an axis the table cannot take; ``field`` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Clause:
    column: str
    op: str
    value: str


def parse_filter(text: str, columns: tuple[str, ...]) -> list[Clause]:
    """The clauses of a filter expression; ``BadView`` saying what is wrong and where."""
    if len(text) > FILTER_CHARS:
        raise BadView("filter", f"at most {FILTER_CHARS} characters")
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text.rstrip()):
        found = TOKEN.match(text, at)
        if found is None or found.end() == at:
            raise BadView("filter", f"cannot read {text[at : at + 20]!r}")
        kind = found.lastgroup or ""
        tokens.append(
            (
                "op" if kind == "op" else "name" if kind == "quoted_name" else "text",
                found.group(kind),
            )
        )
        at = found.end()
    clauses: list[Clause] = []
    while tokens:
        if len(tokens) < 3 or tokens[1][0] != "op" or tokens[0][0] == "op" or tokens[2][0] == "op":
            raise BadView("filter", "each clause is <column> <op> <value>, joined by 'and'")
        (_, column), (_, op), (_, value) = tokens[:3]
        if column not in columns:
            raise BadView("filter", f"no column {column[:80]!r} in the table")
        clauses.append(Clause(column, op, value))
        tokens = tokens[3:]
        if tokens:
            if tokens[0][0] != "text" or tokens[0][1].lower() != "and":
                raise BadView("filter", f"clauses are joined by 'and', not {tokens[0][1]!r}")
            tokens = tokens[1:]
            if not tokens:
                raise BadView("filter", "a clause is missing after 'and'")
        if len(clauses) > CLAUSES:
            raise BadView("filter", f"at most {CLAUSES} clauses")
    return clauses


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _test(op: str) -> Callable[[object, object], bool]:
    return {
        "=": lambda a, b: a == b,
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }[op]


def matching(results: Results, clauses: list[Clause]) -> list[int]:
    """The indexes of the rows every clause holds for, in unit order. A cell without a value
    holds for ``!=`` only."""
    kept = list(range(len(results.rows)))
    for clause in clauses:
        index = results.columns.index(clause.column)
        numbers = results.numbers.get(clause.column)
        wanted = _number(clause.value)
        if clause.op == "~":
            needle = clause.value.lower()
            kept = [i for i in kept if needle in results.rows[i][index].lower()]
        elif numbers is not None and wanted is not None:
            test = _test(clause.op)
            kept = [
                i
                for i in kept
                if (numbers[i] is None and clause.op == "!=")
                or (numbers[i] is not None and test(numbers[i], wanted))
            ]
        else:
            test = _test(clause.op)
            kept = [
                i
                for i in kept
                if (results.rows[i][index] in MISSING and clause.op == "!=")
                or (
                    results.rows[i][index] not in MISSING
                    and test(results.rows[i][index], clause.value)
                )
            ]
    return kept


def averaged(results: Results, indexes: list[int], over: str) -> Results:
    """The rows of ``indexes`` averaged over the axis ``over``: a row per combination of the
    other parameters (in the order first seen), ``n``, then each numeric result field's
    ``mean``, ``std``, ``min`` and ``max``."""
    parameters = results.parameters()
    if over not in parameters:
        raise BadView(
            "over", f"{over[:80]!r} is no parameter of the table ({', '.join(parameters)})"
        )
    # A combined table's rows stay apart by run (``runs.reads.comparison``).
    keys = [
        *(["run"] if results.columns[:1] == ("run",) else []),
        *(p for p in parameters if p != over),
    ]
    fields = [f for f in results.result_fields() if results.numeric(f)]
    places = [results.columns.index(k) for k in keys]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i in indexes:
        groups.setdefault(tuple(results.rows[i][p] for p in places), []).append(i)
    columns = (*keys, "n", *(f"{field} {stat}" for field in fields for stat in STATS))
    rows = []
    for key, members in groups.items():
        cells = [*key, str(len(members))]
        for field in fields:
            values = [v for i in members if (v := results.numbers[field][i]) is not None]
            cells += [_figure(v) for v in _stats(values)]
        rows.append(tuple(cells))
    view = Results(columns, rows, len(rows), results.complete, results.size, list(results.notes))
    view.numbers = numeric_columns(columns, rows)
    view.partial = results.partial
    view.grouped = tuple(keys)
    return view


def _stats(values: list[float]) -> tuple[float | None, ...]:
    if not values:
        return (None, None, None, None)
    mean = math.fsum(values) / len(values)
    std = (
        math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
        if len(values) > 1
        else None
    )
    return (mean, std, min(values), max(values))


def _figure(value: float | None) -> str:
    return "" if value is None else repr(value)


_LOCK = threading.Lock()


def view(results: Results, filter_text: str = "", over: str = "") -> Results:
    """The table as asked: its rows that the filter holds for, averaged over ``over``; the
    table itself when neither is asked. ``BadView`` naming the parameter otherwise."""
    filter_text, over = filter_text.strip(), over.strip()
    if not filter_text and not over:
        return results
    key = (filter_text, over)
    with _LOCK:
        kept = results.views.pop(key, None)
        if kept is not None:
            results.views[key] = kept
            return kept
    clauses = parse_filter(filter_text, results.columns) if filter_text else []
    indexes = matching(results, clauses)
    if over:
        made = averaged(results, indexes, over)
    else:
        rows = [results.rows[i] for i in indexes]
        made = Results(
            results.columns, rows, len(rows), results.complete, results.size, list(results.notes)
        )
        made.numbers = {c: [v[i] for i in indexes] for c, v in results.numbers.items()}
        made.partial = results.partial
    if filter_text:
        made.notes.append(f"{len(indexes):,} of {len(results.rows):,} rows where {filter_text}")
    with _LOCK:
        results.views[key] = made
        while len(results.views) > VIEWS_KEPT:
            results.views.pop(next(iter(results.views)))
    return made
