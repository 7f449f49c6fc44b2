"""The ledger of a split task on the shared store: which units are pending, claimed, done.

It is correct on a network filesystem shared by several machines: no locks, only atomic
create, rename and link, and no clock shared between machines (a heartbeat is stale when the
coordinator saw it unchanged for ``stale_s`` by its own clock). Units are grouped in at most
``MAX_BLOCKS`` blocks, so a ledger of a million units stays a few thousand files:

``units/ledger.json``
    ``{"units": n, "block": b}``, created once as a link of a complete file.
``units/owners/<worker>``
    A token per worker holding its id; a claim is a hard link to it (one atomic call).
``units/claims/<block>``
    A claim of one block (units ``block*b`` to ``block*b+b-1``), removed once it is done or
    released, so only claims in progress are listed.
``units/done/<start>-<end>``
    The results of units ``start..end-1``, written to a temporary file and renamed by the pool
    process that computed them: a unit is done when a piece covers it. A header holds the
    length and CRC-32 of the body (a pickled list of each unit's pickled result), so a piece
    the store truncated or damaged is found by the merge, set aside and computed again. A
    unit computed twice (a stale worker that was only slow) has two pieces with the same
    results; the merge takes one.
``units/heartbeats/<worker>``
    Rewritten every heartbeat with a counter that changes each time.
``units/reused/<start>-<end>``
    Pieces of units an earlier task with the same key computed (docs/resume.md), checked and
    copied in by the service before any worker started: done as the pieces of ``done/`` are,
    in a folder of the service's that the workers only read.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import pickle
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from harness.files import temporary_name, write_atomic
from harness.pieces import (
    DAMAGED_SUFFIX,
    ORIGINS,
    PIECE_FOLDERS,
    REUSED,
    decode_piece,
    piece_units,
    read_origins,
    store_pieces,
)

MAX_BLOCKS = 4096
"""Blocks of a ledger at most: bounds its files and the imbalance of the last block."""


class DamagedPieces(RuntimeError):
    """Pieces of the ledger were truncated or damaged; they were set aside, their units are
    not done any more."""

    def __init__(self, names: Sequence[str], missing: Sequence[range]) -> None:
        super().__init__(f"damaged pieces {', '.join(names)}: units {describe(missing)} not done")
        self.names = list(names)
        self.missing = list(missing)


@dataclass(frozen=True)
class Claim:
    """A claimed block and its units not yet done, as ranges."""

    block: int
    ranges: tuple[range, ...]


class Ledger:
    """The ledger of one task, as one worker (or the merge, ``worker=None``) sees it."""

    def __init__(self, directory: Path, size: int, block: int, worker: str | None) -> None:
        self.directory = directory
        self.size = size
        self.block = block
        self.worker = worker
        self.blocks = math.ceil(size / block) if size else 0
        self._pieces: dict[str, tuple[int, int]] = {}
        """The pieces by their path below the ledger (``done/0-5``), as unit ranges."""
        self._aside: set[str] = set()
        """Damaged pieces that could not be renamed (in ``reused/``, the service's): not listed
        again."""
        self._listed: dict[str, set[str]] = {folder: set() for folder in PIECE_FOLDERS}
        """The names of each folder a refresh looked at: the next one looks only at the others,
        so a refresh costs its listing and what is new, not every piece again."""
        self._gaps: list[tuple[int, int]] = [(0, size)] if size else []
        """The units no piece covers, as sorted, disjoint ``(start, end)`` pairs."""
        self._seen: dict[str, tuple[str | None, float]] = {}
        # Strings, not Paths: a batch of short units touches hundreds of claims.
        self._claims = os.path.join(directory, "claims")
        self._token = os.path.join(directory, "owners", worker) if worker is not None else ""

    # -- creation ------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, units: int, worker: str) -> Ledger:
        """The ledger of ``units`` units at ``directory``, created by the first worker.

        Raises ``ValueError`` when it exists with another number of units.
        """
        if units < 1:
            raise ValueError(f"a ledger needs at least one unit, not {units}")
        for sub in ("owners", "claims", "done", "heartbeats"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        path = directory / "ledger.json"
        if not path.exists():
            temporary = temporary_name(path)
            block = math.ceil(units / MAX_BLOCKS)
            temporary.write_text(json.dumps({"units": units, "block": block}))
            try:
                os.link(temporary, path)  # the first worker's size wins, atomically
            except FileExistsError:
                pass
            finally:
                temporary.unlink()
        ledger = cls.read(directory, worker=worker)
        if ledger.size != units:
            raise ValueError(
                f"the ledger {directory} has {ledger.size} units, the task has {units}"
            )
        token = ledger.token
        if not token.exists():
            write_atomic(token, worker)
        return ledger

    @classmethod
    def read(cls, directory: Path, worker: str | None = None) -> Ledger:
        """An existing ledger; ``FileNotFoundError`` when no worker created it."""
        data = json.loads((directory / "ledger.json").read_text())
        return cls(directory, int(data["units"]), int(data["block"]), worker)

    @property
    def token(self) -> Path:
        """The file a claim of this worker links to."""
        if self.worker is None:
            raise RuntimeError("the ledger is read without a worker")
        return Path(self._token)

    def _claim_path(self, block: int) -> str:
        return f"{self._claims}/{block}"

    # -- what is done --------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the pieces written since the last refresh (a listing of ``done/``)."""
        for folder in PIECE_FOLDERS:
            try:
                names = os.listdir(self.directory / folder)
            except FileNotFoundError:
                if folder == REUSED:
                    continue  # nothing was reused
                raise
            listed = self._listed[folder]
            fresh = set(names).difference(listed)
            listed.update(fresh)
            for name in fresh:
                piece = f"{folder}/{name}"
                if name.startswith(".") or piece in self._aside:
                    continue
                if (units := piece_units(name)) is not None:
                    self._pieces[piece] = units
                    self._cover(*units)

    def _cover(self, start: int, end: int) -> None:
        """Take units ``start`` to ``end`` out of the gaps: a bisection and a splice, however
        many pieces there are."""
        gaps = self._gaps
        first = bisect.bisect_right(gaps, start, key=itemgetter(1))
        last = bisect.bisect_left(gaps, end, lo=first, key=itemgetter(0))
        if first == last:
            return
        left = [(gaps[first][0], start)] if gaps[first][0] < start else []
        right = [(end, gaps[last - 1][1])] if end < gaps[last - 1][1] else []
        gaps[first:last] = left + right

    def _find_gaps(self) -> None:
        """The gaps again from every piece (after one was set aside)."""
        self._gaps = [(0, self.size)] if self.size else []
        for start, end in self._pieces.values():
            self._cover(start, end)

    def missing(self) -> list[range]:
        """The units no piece covers yet, as ranges (after a ``refresh``)."""
        return [range(start, end) for start, end in self._gaps]

    def covered(self, ranges: Sequence[range]) -> list[int]:
        """The units of ``ranges`` a piece covers (after a ``refresh``)."""
        return [
            unit
            for r in ranges
            for unit in r
            if not any(start <= unit < end for start, end in self._gaps)
        ]

    def is_complete(self) -> bool:
        """Whether every unit is done (refreshes first)."""
        self.refresh()
        return not self._gaps

    def pending_count(self) -> int:
        """How many blocks have units not done (claimed or not)."""
        count, last = 0, -1
        for start, end in self._gaps:
            first = max(start // self.block, last + 1)
            last = (end - 1) // self.block
            count += max(0, last - first + 1)
        return count

    def pending_blocks(self) -> Iterator[int]:
        """The blocks with units not done, ascending (claimed or not)."""
        last = -1
        for start, end in self._gaps:
            for block in range(max(start // self.block, last + 1), (end - 1) // self.block + 1):
                last = block
                yield block

    def uncovered(self, block: int) -> tuple[range, ...]:
        """The units of a block no piece covers yet."""
        low, high = block * self.block, min((block + 1) * self.block, self.size)
        return tuple(
            range(max(low, start), min(high, end))
            for start, end in self._gaps
            if start < high and end > low
        )

    # -- a worker's claims ---------------------------------------------------------------

    def release_incarnation(self) -> list[int]:
        """Release the claims an earlier incarnation of this worker left; returns the blocks."""
        inode = os.stat(self.token).st_ino
        blocks = [int(name) for name in os.listdir(self._claims) if name.isdigit()]
        return [block for block in blocks if self._drop(block, inode)]

    def claim(self, count: int) -> list[Claim]:
        """Claim up to ``count`` pending blocks; returns them with their units not done."""
        self.refresh()
        taken = {int(n) for n in os.listdir(self._claims) if n.isdigit()}
        inode = os.stat(self._token).st_ino
        claimed: list[int] = []
        for block in self.pending_blocks():
            if block in taken:
                continue
            try:
                os.link(self._token, self._claim_path(block))
            except FileExistsError:
                # NFS may answer a retried link that succeeded with EEXIST: ours all the same.
                if not self._holds(block, inode):
                    continue
            claimed.append(block)
            if len(claimed) >= count:
                break
        if not claimed:
            return []
        # A piece renamed just before its worker removed the claim we took over was not in
        # the first listing; list again so a done block is not computed twice.
        self.refresh()
        claims = []
        for block in claimed:
            ranges = self.uncovered(block)
            if ranges:
                claims.append(Claim(block, ranges))
            else:
                self.release([block])
        return claims

    def _holds(self, block: int, inode: int) -> bool:
        try:
            return os.stat(self._claim_path(block)).st_ino == inode
        except FileNotFoundError:
            return False

    def _drop(self, block: int, inode: int) -> bool:
        """Remove the claim of a block if it is (still) a link to ``inode``; whether it was."""
        if not self._holds(block, inode):
            return False
        try:
            os.unlink(self._claim_path(block))
        except FileNotFoundError:
            return False
        return True

    def release(self, blocks: Sequence[int]) -> None:
        """Remove this worker's claims of blocks (a claim another worker took over stays)."""
        inode = os.stat(self._token).st_ino
        for block in blocks:
            self._drop(block, inode)

    def write_piece(self, units: Sequence[int], results: Sequence[Any]) -> None:
        """Store the results of units (in the order computed), one piece per contiguous run."""
        payloads = [pickle.dumps(result, pickle.HIGHEST_PROTOCOL) for result in results]
        store_pieces(self.directory / "done", units, payloads)

    def heartbeat(self, beat: int) -> None:
        """Rewrite this worker's heartbeat with a new counter."""
        text = json.dumps(
            {"worker": self.worker, "beat": beat, "time": time.time(), "host": socket.gethostname()}
        )
        write_atomic(self.directory / "heartbeats" / str(self.worker), text)

    def release_stale(self, stale_s: float, mine: set[int], now: float | None = None) -> list[int]:
        """Release the claims of workers whose heartbeat did not change for ``stale_s``.

        Measured by this process's clock from when it first saw the heartbeat unchanged, so
        the clocks of the machines need not agree. This worker's own claims not in ``mine``
        (its blocks in flight) are orphans and released at once. The claims of ``mine`` are
        not even read (a coordinator's in flight are most of them, read every poll): one of
        them another worker took over is that worker's to end, as the block is this worker's
        to compute. ``now`` is this process's ``time.monotonic()``. Returns the blocks.
        """
        now = time.monotonic() if now is None else now
        held: dict[str, list[tuple[int, int]]] = {}
        for name in os.listdir(self._claims):
            if not name.isdigit() or int(name) in mine:
                continue
            try:
                with open(self._claim_path(int(name)), "rb") as handle:
                    owner = handle.read().decode(errors="replace").strip()
                    inode = os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                continue
            held.setdefault(owner, []).append((int(name), inode))
        released = []
        for owner, claims in held.items():
            if owner != self.worker:
                try:
                    beat: str | None = (self.directory / "heartbeats" / owner).read_text()
                except (FileNotFoundError, IsADirectoryError):
                    beat = None
                seen = self._seen.get(owner)
                if seen is None or seen[0] != beat:
                    self._seen[owner] = (beat, now)
                    continue
                if now - seen[1] < stale_s:
                    continue
            released += [block for block, inode in claims if self._drop(block, inode)]
        return released

    # -- the merge -----------------------------------------------------------------------

    def results(self) -> list[Any]:
        """The result of every unit in unit order.

        ``RuntimeError`` naming units not done; ``DamagedPieces`` when pieces were damaged
        and no other piece covers their units (they are set aside first).
        """
        self.refresh()
        if self._gaps:
            raise RuntimeError(f"units not done: {describe(self.missing())}")
        results: list[Any] = []
        damaged: list[str] = []
        for (start, end), name in sorted((v, k) for k, v in self._pieces.items()):
            if end <= len(results):
                continue  # a piece of units merged already (computed twice)
            try:
                values = decode_piece((self.directory / name).read_bytes(), end - start)
            except ValueError:
                damaged.append(name)
                continue
            if start > len(results):
                continue  # after a damaged piece: read again once it is set aside
            results.extend(values[len(results) - start :])
        if damaged:
            for name in damaged:
                self._set_aside(name)
            if self._gaps:
                raise DamagedPieces(damaged, self.missing())
            return self.results()  # other pieces cover the damaged ones' units
        return results[: self.size]

    def reused_from(self) -> dict[int, str]:
        """The units of the merge that no worker of this task computed, each with the task it
        was reused from (``<run>/<task>``, as ``reused/.origins.json`` says): those only a
        reused piece covers. Empty when nothing was reused; an origin unreadable or unsaid is
        ``"earlier"`` (the unit is still said to be reused)."""
        pieces = self._pieces.items()
        reused = [(name, units) for name, units in pieces if name.startswith(f"{REUSED}/")]
        if not reused:
            return {}
        origins = read_origins(self.directory / REUSED / ORIGINS)
        computed: set[int] = set()
        for name, (start, end) in self._pieces.items():
            if not name.startswith(f"{REUSED}/"):
                computed.update(range(start, min(end, self.size)))
        found: dict[int, str] = {}
        for name, (start, end) in sorted(reused, key=lambda item: item[1]):
            origin = origins.get(name.partition("/")[2], "earlier")
            for unit in range(start, min(end, self.size)):
                if unit not in computed:
                    found.setdefault(unit, origin)
        return found

    def _set_aside(self, piece: str) -> None:
        """Rename a damaged piece out of the listing and forget it; one the workers may not
        rename (a reused piece: the service's) is only forgotten."""
        folder, _, name = piece.partition("/")
        place = self.directory / folder
        try:
            os.replace(place / name, place / f".{name}{DAMAGED_SUFFIX}")
        except FileNotFoundError:
            pass
        except PermissionError:
            self._aside.add(piece)
        self._listed[folder].discard(name)  # a piece of its units written again is new
        self._pieces.pop(piece, None)
        self._find_gaps()


def describe(ranges: Sequence[range], limit: int = 20) -> str:
    """Ranges of units for a message: ``3, 7-9, 12`` (the first ``limit``, then a count)."""
    parts = [str(r.start) if len(r) == 1 else f"{r.start}-{r.stop - 1}" for r in ranges]
    total = sum(len(r) for r in ranges)
    text = ", ".join(parts[:limit])
    if len(parts) > limit:
        text += f", … ({total} units)"
    return text
