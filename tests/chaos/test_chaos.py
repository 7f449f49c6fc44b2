"""A round of each harm the service must survive (``bench/chaos.py`` plays many), and the
accounting of the rounds, with outcomes made by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos import rounds
from tests.chaos.rounds import HARMS, OWN_ARENA, UNITS, Arena, Harm, Outcome, Tally, progress
from tests.chaos.survived import assert_survived

ROUNDS = 1

LANDED = Harm(landed=True, at=100.0, state="running", done=12, what="SIGKILL worker 1")


def right_end(**changes) -> Outcome:
    """The outcome of a round the run survived, changed by ``changes``."""
    fields = {"kind": "kill-harness", "state": "succeeded", "harm": LANDED, "ended_at": 110.0}
    return Outcome(**{**fields, "identical": True, **changes})


def test_a_run_that_succeeded_after_its_harm_landed_is_right():
    assert right_end().landed and right_end().right


def test_a_harm_that_found_no_victim_did_not_land_and_the_round_is_not_right():
    missed = Harm(landed=False, at=100.0, state="succeeded", done=UNITS, what="the run had ended")
    outcome = right_end(harm=missed)
    assert not outcome.landed and not outcome.right


def test_a_harm_done_after_the_run_ended_did_not_land():
    outcome = right_end(ended_at=99.0)
    assert not outcome.landed and not outcome.right


def test_a_unit_recorded_done_twice_makes_the_round_not_right():
    assert not right_end(twice=1).right


def test_the_tally_counts_rounds_harms_landed_and_right_ends_apart():
    missed = Harm(landed=False, state="succeeded", done=UNITS, what="the run had ended")
    tally = Tally("kill-harness", [right_end(), right_end(harm=missed), right_end(twice=2)])
    line = tally.line()
    assert "rounds   3  harms landed   2  right   1" in line
    assert "units twice   2" in line


def test_progress_counts_each_line_of_a_unit(tmp_path: Path):
    class Store:
        store = tmp_path

    folder = rounds.task_dir(Store(), "r1")  # type: ignore[arg-type]
    folder.mkdir(parents=True)
    lines = [0, 1, 1, 2]
    (folder / "progress.jsonl").write_text(
        "".join(f'{{"unit": {u}, "worker": "w0", "seconds": 0.1}}\n' for u in lines) + '{"un'
    )
    assert progress(Store(), "r1") == {0: 1, 1: 2, 2: 1}  # type: ignore[arg-type]


def test_a_round_whose_harm_missed_is_played_again_on_a_new_run(monkeypatch, tmp_path: Path):
    runs = iter(["r1", "r2", "r3"])
    harms = iter([Harm(landed=False, what="the run had ended"), LANDED])
    monkeypatch.setattr(rounds, "_submit", lambda api: next(runs))
    monkeypatch.setitem(HARMS, "kill-harness", lambda service, api, rng, run_id: next(harms))
    monkeypatch.setattr(
        rounds,
        "finish",
        lambda service, api, run_id, kind, harm, tries: right_end(
            harm=harm, tries=tries, note=run_id
        ),
    )
    arena = Arena("kill-harness", tmp_path)
    arena.api = None  # type: ignore[assignment]
    outcome = arena.play_round()
    assert (outcome.note, outcome.tries, outcome.right) == ("r2; missed on r1", 2, True)


def test_a_round_whose_harm_never_lands_is_not_counted_right(monkeypatch, tmp_path: Path):
    runs = iter(f"r{i}" for i in range(10))
    monkeypatch.setattr(rounds, "_submit", lambda api: next(runs))
    monkeypatch.setitem(
        HARMS, "kill-web", lambda service, api, rng, run_id: Harm(landed=False, what="ended")
    )
    monkeypatch.setattr(
        rounds,
        "finish",
        lambda service, api, run_id, kind, harm, tries: right_end(harm=harm, tries=tries),
    )
    arena = Arena("kill-web", tmp_path)
    arena.api = None  # type: ignore[assignment]
    outcome = arena.play_round()
    assert outcome.tries == rounds.TRIES and not outcome.landed and not outcome.right


@pytest.fixture(scope="module")
def shared_arena(tmp_path_factory) -> Iterator[Arena]:
    """One serve for the rounds of every harm that needs no arena of its own, one after
    another: each round's harm must leave it as able to take the next as a new one."""
    with Arena("shared", tmp_path_factory.mktemp("chaos")) as arena:
        yield arena


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(set(HARMS) - OWN_ARENA))
def test_a_run_survives_the_harm_with_no_unit_lost_and_the_clean_run_s_output(
    kind: str, shared_arena: Arena
):
    assert_survived(Tally(kind, [shared_arena.play_round(kind) for _ in range(ROUNDS)]))
