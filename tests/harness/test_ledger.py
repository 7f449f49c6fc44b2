"""The ledger: claims, pieces of results, incarnations, stale workers, the merge's view."""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path
from typing import Any

import pytest

from harness import ledger as ledger_module
from harness import merge
from harness.examples.squares import TASK_TYPE as SQUARES
from harness.ledger import MAX_BLOCKS, DamagedPieces, Ledger, describe
from harness.pieces import encode_piece, piece_intact
from harness.progress import append_progress
from harness.report import units_done


def compute(ledger: Ledger, claims) -> None:
    """Do what a worker does with claims: square their units, store them, drop the claims."""
    units = [u for claim in claims for r in claim.ranges for u in r]
    ledger.write_piece(units, [u * u for u in units])
    ledger.release([c.block for c in claims])


def test_a_small_ledger_has_a_block_per_unit_and_a_large_one_at_most_max_blocks(
    tmp_path: Path,
) -> None:
    assert Ledger.open(tmp_path / "a", 10, "w").block == 1
    large = Ledger.open(tmp_path / "b", 10 * MAX_BLOCKS + 1, "w")
    assert large.block == 11 and large.blocks <= MAX_BLOCKS


def test_two_workers_claim_disjoint_blocks_until_none_is_pending(tmp_path: Path) -> None:
    first = Ledger.open(tmp_path, 10, "w1")
    second = Ledger.open(tmp_path, 10, "w2")

    a = first.claim(4)
    b = second.claim(100)

    assert [c.block for c in a] == [0, 1, 2, 3]
    assert [c.block for c in b] == [4, 5, 6, 7, 8, 9]
    assert first.claim(1) == [] and second.claim(1) == []
    compute(first, a)
    compute(second, b)
    assert first.is_complete()
    assert Ledger.read(tmp_path).results() == [u * u for u in range(10)]


def test_a_claim_is_a_link_to_its_workers_token(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 3, "sweep-w1")
    ledger.claim(1)

    assert (tmp_path / "claims" / "0").read_text() == "sweep-w1"
    assert os.stat(tmp_path / "claims" / "0").st_ino == os.stat(ledger.token).st_ino


def test_the_size_of_a_ledger_is_fixed_by_its_first_worker(tmp_path: Path) -> None:
    Ledger.open(tmp_path, 10, "w1")

    with pytest.raises(ValueError, match="has 10 units, the task has 12"):
        Ledger.open(tmp_path, 12, "w2")


def test_a_done_unit_is_never_claimed_again(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 5, "w1")
    ledger.write_piece([1, 2], [1, 4])

    assert [c.block for c in ledger.claim(10)] == [0, 3, 4]


def test_a_block_done_in_part_is_claimed_for_its_remaining_units(tmp_path: Path) -> None:
    size = 2 * MAX_BLOCKS  # blocks of two units
    first = Ledger.open(tmp_path, size, "w1")
    (claim,) = first.claim(1)
    assert claim.ranges == (range(0, 2),)
    first.write_piece([0], [0])  # stopped after unit 0: the rest is released
    first.release([0])

    second = Ledger.open(tmp_path, size, "w2")
    (again,) = second.claim(1)

    assert again.block == 0 and again.ranges == (range(1, 2),)


def test_a_unit_computed_twice_merges_to_the_right_result(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 6, "w1")
    ledger.write_piece([0, 1, 2, 3], [0, 1, 4, 9])
    ledger.write_piece([2, 3, 4], [4, 9, 16])  # a slow stale worker wrote these again
    ledger.write_piece([3, 4, 5], [9, 16, 25])
    ledger.write_piece([0, 1, 2, 3], [0, 1, 4, 9])  # and the same piece again

    assert Ledger.read(tmp_path).results() == [0, 1, 4, 9, 16, 25]


@pytest.mark.parametrize("seed", range(30))
def test_the_units_not_done_are_those_no_piece_covers_however_the_pieces_arrive(
    tmp_path: Path, seed: int
) -> None:
    """Pieces that overlap, repeat, touch, reach past the end, come in both folders and over
    several refreshes: the units not done are always the maximal runs no piece covers."""
    rng = random.Random(seed)
    size = rng.randint(1, 80)
    ledger = Ledger.open(tmp_path, size, "w1")
    (tmp_path / "reused").mkdir()
    covered: set[int] = set()
    for _ in range(rng.randint(1, 6)):
        for _ in range(rng.randint(0, 6)):
            start = rng.randrange(size + 2)
            end = start + rng.randint(1, 20)
            folder = rng.choice(["done", "done", "reused"])
            (tmp_path / folder / f"{start}-{end}").write_bytes(b"")
            covered.update(range(start, end))
        ledger.refresh()

        runs: list[range] = []
        for unit in (u for u in range(size) if u not in covered):
            if runs and runs[-1].stop == unit:
                runs[-1] = range(runs[-1].start, unit + 1)
            else:
                runs.append(range(unit, unit + 1))
        assert ledger.missing() == runs
        assert ledger.is_complete() == (not runs)


def test_a_piece_is_written_per_contiguous_run_of_units(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 10, "w1")
    ledger.write_piece([0, 1, 2, 5, 6, 9], list("abcdef"))

    names = sorted(n for n in os.listdir(tmp_path / "done") if not n.startswith("."))
    assert names == ["0-3", "5-7", "9-10"]
    ledger.refresh()
    assert ledger.missing() == [range(3, 5), range(7, 9)]


def test_the_merge_names_the_units_not_done(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path, 20, "w1")
    ledger.write_piece(list(range(0, 3)) + list(range(6, 19)), [0] * 16)

    with pytest.raises(RuntimeError, match=r"units not done: 3-5, 19$"):
        Ledger.read(tmp_path).results()


def test_a_new_incarnation_releases_the_claims_of_the_one_before(tmp_path: Path) -> None:
    before = Ledger.open(tmp_path, 10, "sweep-w1")
    before.claim(3)
    other = Ledger.open(tmp_path, 10, "sweep-w2")
    other.claim(2)

    again = Ledger.open(tmp_path, 10, "sweep-w1")

    assert sorted(again.release_incarnation()) == [0, 1, 2]
    assert sorted(os.listdir(tmp_path / "claims")) == ["3", "4"]


def test_a_worker_releases_only_its_own_claims(tmp_path: Path) -> None:
    first = Ledger.open(tmp_path, 4, "w1")
    second = Ledger.open(tmp_path, 4, "w2")
    second.claim(1)

    first.release([0])

    assert os.listdir(tmp_path / "claims") == ["0"]


def test_the_claims_of_a_worker_whose_heartbeat_stopped_are_released_after_stale_s(
    tmp_path: Path,
) -> None:
    coordinator = Ledger.open(tmp_path, 10, "sweep-w0")
    dead = Ledger.open(tmp_path, 10, "sweep-w1")
    alive = Ledger.open(tmp_path, 10, "sweep-w2")
    dead.heartbeat(0)
    alive.heartbeat(0)
    dead.claim(2)
    alive.claim(2)

    assert coordinator.release_stale(30, set(), now=100.0) == []  # first look
    alive.heartbeat(1)
    assert coordinator.release_stale(30, set(), now=129.0) == []  # not stale yet
    alive.heartbeat(2)
    released = coordinator.release_stale(30, set(), now=131.0)

    assert sorted(released) == [0, 1]
    assert sorted(os.listdir(tmp_path / "claims")) == ["2", "3"]
    assert [c.block for c in coordinator.claim(10)] == [0, 1, 4, 5, 6, 7, 8, 9]


def test_a_worker_without_a_heartbeat_is_stale_after_stale_s_too(tmp_path: Path) -> None:
    coordinator = Ledger.open(tmp_path, 2, "sweep-w0")
    Ledger.open(tmp_path, 2, "sweep-w1").claim(1)

    assert coordinator.release_stale(5, set(), now=0.0) == []
    assert coordinator.release_stale(5, set(), now=5.0) == [0]


def test_the_coordinators_own_claims_not_in_flight_are_released_at_once(tmp_path: Path) -> None:
    coordinator = Ledger.open(tmp_path, 3, "sweep-w0")
    coordinator.claim(3)

    assert sorted(coordinator.release_stale(60, {1}, now=0.0)) == [0, 2]
    assert sorted(os.listdir(tmp_path / "claims")) == ["1"]


def test_a_coordinator_reads_none_of_its_claims_in_flight_when_it_looks_for_stale_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone coordinator's claims are nearly all in flight: reading each at every poll
    was most of what a poll cost."""
    coordinator = Ledger.open(tmp_path, 6, "sweep-w0")
    coordinator.claim(4)
    Ledger.open(tmp_path, 6, "sweep-w1").claim(1)
    opened: list[str] = []

    def spy(path: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(os.path.basename(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(ledger_module, "open", spy, raising=False)

    assert sorted(coordinator.release_stale(60, {0, 1, 2}, now=0.0)) == [3]
    assert sorted(opened) == ["3", "4"]
    assert sorted(os.listdir(tmp_path / "claims")) == ["0", "1", "2", "4"]


def test_progress_counts_distinct_units(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    append_progress(progress, "w1", [0, 1, 2], [0.1, 0.2, 0.3])
    append_progress(progress, "w2", [2, 3], [0.3, 0.4])

    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert lines[0] == {"unit": 0, "worker": "w1", "seconds": 0.1}
    assert len(lines) == 5
    assert units_done(tmp_path) == 4
    assert units_done(tmp_path / "elsewhere") == 0


def test_progress_lines_are_json_whatever_the_worker_and_the_failure_say(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    why = 'exit 1: "100%" done\n\\ %s %d'
    append_progress(progress, 'w-%d"1', [7, 8], [0.1234567, 12.5], [None, why])

    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert lines == [
        {"unit": 7, "worker": 'w-%d"1', "seconds": 0.123457},
        {"unit": 8, "worker": 'w-%d"1', "seconds": 12.5, "failed": why},
    ]


def test_describe_shortens_long_lists_of_units() -> None:
    ranges = [range(i * 10, i * 10 + 2) for i in range(30)]

    text = describe(ranges)

    assert text.startswith("0-1, 10-11") and text.endswith("… (60 units)")


# Pieces reused from an earlier task with the same key (units/reused/, the service's).


def reused_pieces(directory: Path, pieces: dict[str, list[int]]) -> None:
    """Pieces as the service copies them in before any worker starts."""
    folder = directory / "reused"
    folder.mkdir(parents=True)
    for name, units in pieces.items():
        (folder / name).write_bytes(encode_piece([pickle.dumps(u * u) for u in units]))


def test_reused_pieces_are_done_units_no_worker_claims_and_the_merge_reads(tmp_path: Path) -> None:
    reused_pieces(tmp_path, {"0-4": [0, 1, 2, 3], "8-10": [8, 9]})
    ledger = Ledger.open(tmp_path, 10, "w1")

    claims = ledger.claim(100)

    assert [u for c in claims for r in c.ranges for u in r] == [4, 5, 6, 7]
    compute(ledger, claims)
    assert ledger.is_complete()
    assert Ledger.read(tmp_path).results() == [u * u for u in range(10)]


def test_a_damaged_reused_piece_the_worker_may_not_rename_is_left_and_computed_again(
    tmp_path: Path, monkeypatch
) -> None:
    reused_pieces(tmp_path, {"0-3": [0, 1, 2]})
    piece = tmp_path / "reused" / "0-3"
    piece.write_bytes(piece.read_bytes()[:-2])
    ledger = Ledger.open(tmp_path, 3, "w1")
    replace = os.replace

    def not_ours(source, target, *args, **kwargs):
        if Path(source).parent.name == "reused":
            raise PermissionError(13, "Permission denied", str(source))
        return replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", not_ours)
    settings = SQUARES.parse_settings({"n": 3})
    with pytest.raises(DamagedPieces) as damaged:
        ledger.results()
    assert "reused/0-3" in str(damaged.value)
    merge.recompute(SQUARES, settings, ledger, damaged.value.missing)

    assert ledger.results() == [0, 1, 4]
    assert piece.exists()  # the service's piece is left as it was


def test_a_piece_is_intact_only_with_its_header_length_and_checksum() -> None:
    piece = encode_piece([pickle.dumps(1), pickle.dumps(4)])
    assert piece_intact(piece)
    assert not piece_intact(piece[:-1]) and not piece_intact(piece[:-1] + b"x")
    assert not piece_intact(pickle.dumps([1, 4]))  # before checksums: cannot be checked
    assert not piece_intact(b"")
