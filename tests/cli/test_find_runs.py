"""``simrun runs`` finds runs as the API does (tags, a parameter's value, dates), and ``simrun
tag`` and ``simrun note`` file a run, as a user runs them against a live server."""

from __future__ import annotations

import datetime

import pytest

from runs.models import Run
from tests.api.test_compare_and_find import sweep_run
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)


def listed(result) -> set[str]:
    assert result.code == 0, result.err
    return {line.split()[0] for line in result.out.splitlines()[1:-1] if line.strip()}


def test_runs_are_found_by_tag_by_a_parameters_value_and_by_dates(simrun, owner, store):
    cold = sweep_run(owner, store, "cold")
    hot = sweep_run(owner, store, "hot", axis="{linspace: [2, 4, 3]}")
    plain = ended(submitted(owner))
    Run.objects.filter(pk=cold.pk).update(
        created_at=datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)
    )

    assert simrun("tag", hot.id, "paper", "ising").out.strip() == f"run {hot.id} tags: paper, ising"
    assert simrun("tag", cold.id, "paper").code == 0
    assert simrun("tag", cold.id, "draft", "paper").out.strip() == (
        f"run {cold.id} tags: paper, draft"
    )
    assert listed(simrun("runs", "--tag", "paper")) == {cold.id, hot.id}
    assert listed(simrun("runs", "--tag", "paper", "--tag", "ising")) == {hot.id}
    assert simrun("tag", cold.id, "--remove", "draft").out.strip() == f"run {cold.id} tags: paper"

    assert listed(simrun("runs", "--param", "T=3")) == {hot.id}
    assert listed(simrun("runs", "--param", "T")) == {cold.id, hot.id}
    assert plain.id not in listed(simrun("runs", "--param", "seed=1"))

    assert listed(simrun("runs", "--until", "2026-03-01")) == {cold.id}  # that day is in
    assert listed(simrun("runs", "--until", "2026-02-28")) == set()
    assert cold.id not in listed(simrun("runs", "--since", "2026-03-02"))
    assert listed(simrun("runs", "--since", "2026-03-01", "--until", "2026-03-01T13:00")) == {
        cold.id
    }


def test_a_note_is_set_and_removed_and_a_bad_filter_or_tag_is_named(simrun, owner, store, stranger):
    run = ended(submitted(owner))
    noted = simrun("note", run.id, "the run of figure 3")
    assert noted.out.strip() == f"run {run.id} note: the run of figure 3"
    assert Run.objects.get(pk=run.pk).note == "the run of figure 3"
    simrun("tag", run.id, "paper", "[bold]")
    shown = simrun("show", run.id).out.splitlines()
    assert "tags: paper, [bold]" in shown and "note: the run of figure 3" in shown
    assert simrun("note", run.id, "").out.strip() == f"run {run.id} no note"

    bad_tag = simrun("tag", run.id, "two words")
    assert bad_tag.code == 2 and "tags" in bad_tag.err
    bad_date = simrun("runs", "--since", "last tuesday")
    assert bad_date.code == 2 and "created_after" in bad_date.err
    bad_param = simrun("runs", "--param", "T__gt=1")
    assert bad_param.code == 2 and "param" in bad_param.err
    theirs = ended(submitted(stranger))
    assert simrun("tag", theirs.id, "mine").code == 2  # not found: not among the runs you see
