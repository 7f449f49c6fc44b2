"""Rounds of chaos against ``simrun serve`` with the local backend, and what each one left.

A round submits a ``squares`` sweep whose units sleep a little, does one harm while it runs
(a SIGKILL of a process of the run or of the service, a full store), undoes what needs undoing
(a restart, free space) and waits for the run's end. It then counts what the harm cost: the
run's end (succeeded is the right one: every harm here is one a run must survive), units
missing from the merged output, units recorded done more than once in ``progress.jsonl``
(finished work done again), and whether the merged files are byte-identical to those of a
clean run. ``tests/chaos`` runs a few rounds; ``bench/chaos.py`` many, and prints figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.e2e.service import ENDED, Service, run_of, run_processes, service_processes, submit
from tests.polling import wait_for

UNITS = 48
DELAY_S = 0.1
SWEEP = {
    "name": "chaos",
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": UNITS, "delay_s": DELAY_S}, "workers": 2}
    },
}
OUTPUTS = ("squares.json", "squares.csv")
END_TIMEOUT_S = 240.0
"""A run not ended this long after its harm is counted stuck."""
STORE_MB = 64
"""The size of the tmpfs store of the full-disk rounds."""


@dataclass
class Outcome:
    """What one round left."""

    kind: str
    state: str
    missing: int = 0
    recomputed: int = 0
    identical: bool = False
    note: str = ""

    @property
    def right(self) -> bool:
        return self.state == "succeeded" and not self.missing and self.identical


@dataclass
class Tally:
    """The outcomes of the rounds of one kind."""

    kind: str
    outcomes: list[Outcome] = field(default_factory=list)

    def line(self) -> str:
        found = self.outcomes
        states = Counter(o.state for o in found)
        return (
            f"{self.kind:<16} rounds {len(found):>3}  right end {sum(o.right for o in found):>3}"
            f"  stuck {states.get('stuck', 0):>2}"
            f"  units lost {sum(o.missing for o in found):>3}"
            f"  units done twice {sum(o.recomputed for o in found):>3}"
            f"  identical {sum(o.identical for o in found):>3}  ends {dict(states)}"
        )


def task_dir(service: Service, run_id: str) -> Path:
    return service.store / "runs" / run_id / "tasks" / "sweep"


def progress(service: Service, run_id: str) -> Counter[int]:
    """How often each unit was recorded done."""
    path = task_dir(service, run_id) / "progress.jsonl"
    counts: Counter[int] = Counter()
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                counts[int(json.loads(line)["unit"])] += 1
    return counts


def outputs(service: Service, run_id: str) -> dict[str, bytes]:
    out = task_dir(service, run_id) / "out"
    found = {}
    for name in OUTPUTS:
        with contextlib.suppress(FileNotFoundError):
            found[name] = (out / name).read_bytes()
    return found


def expected() -> dict[str, bytes]:
    """The merged files of a clean run: what ``squares`` writes for ``UNITS`` units."""
    squares = [i * i for i in range(UNITS)]
    csv = "unit,square\r\n" + "".join(f"{i},{s}\r\n" for i, s in enumerate(squares))
    return {"squares.json": json.dumps(squares).encode(), "squares.csv": csv.encode()}


def mid_sweep(service: Service, run_id: str, api: httpx.Client, done: int = UNITS // 4) -> bool:
    """Wait until some units are recorded done; False when the run ended first."""

    def reached() -> bool:
        return len(progress(service, run_id)) >= done or _state(api, run_id) in ENDED

    wait_for(reached, END_TIMEOUT_S, f"run {run_id} to be mid-sweep")
    return _state(api, run_id) not in ENDED


def finish(service: Service, api: httpx.Client, run_id: str, kind: str, note: str = "") -> Outcome:
    """Wait for the run's end and count what the round cost."""
    deadline = time.monotonic() + END_TIMEOUT_S
    state = _state(api, run_id)
    while state not in ENDED and time.monotonic() < deadline:
        time.sleep(0.2)
        state = _state(api, run_id)
    if state not in ENDED:
        state = "stuck"
    done = progress(service, run_id)
    merged = outputs(service, run_id)
    clean = expected()
    attempts = len(list((task_dir(service, run_id) / "logs").glob("*.exit")))
    return Outcome(
        kind=kind,
        state=state,
        missing=sum(1 for i in range(UNITS) if i not in done),
        recomputed=sum(1 for count in done.values() if count > 1),
        identical=merged == clean,
        note=f"run {run_id}, {attempts} attempts" + (f": {note}" if note else ""),
    )


def _state(api: httpx.Client, run_id: str) -> str:
    """The run's state; a web server that is restarting answers nothing for a moment."""
    try:
        return str(run_of(api, run_id)["state"])
    except (httpx.TransportError, AssertionError):
        return "unknown"


# The harms.


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def harness_processes(service: Service, run_id: str) -> list[int]:
    """The run's ``simrun-worker`` processes and their pool processes."""
    found = run_processes(service.store, run_id)
    workers = {p for p in found if "simrun-worker" in _cmdline(p)}
    return sorted(workers | {p for p in found if _parent(p) in workers})


def kill_harness(service: Service, api: httpx.Client, rng: random.Random) -> str:
    """SIGKILL a random worker or pool process of the run, mid-sweep."""
    run_id = submit(api, SWEEP)
    if not mid_sweep(service, run_id, api):
        return run_id
    found = wait_for(lambda: harness_processes(service, run_id), 60, "the run's processes")
    victim = rng.choice(found)
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim, signal.SIGKILL)
    return run_id


SERVICE_CHILDREN = {
    "celery-worker": lambda line: "celery" in line and " worker " in line,
    "beat": lambda line: "celery" in line and " beat " in line,
    "web": lambda line: "gunicorn" in line,
}


def service_child(service: Service, which: str) -> int:
    """The main process of one child of serve (not one of its own children)."""
    assert service.process is not None
    matches = SERVICE_CHILDREN[which]
    found = [p for p in service_processes(service.process.pid) if matches(_cmdline(p))]
    return next(p for p in found if _parent(p) == service.process.pid)


def kill_child(which: str) -> Callable[[Service, httpx.Client, random.Random], str]:
    """SIGKILL one child of serve mid-run; serve starts it again."""

    def harm(service: Service, api: httpx.Client, rng: random.Random) -> str:
        run_id = submit(api, SWEEP)
        mid_sweep(service, run_id, api)
        with contextlib.suppress(ProcessLookupError):
            os.kill(service_child(service, which), signal.SIGKILL)
        return run_id

    return harm


def kill_service(service: Service, api: httpx.Client, rng: random.Random) -> str:
    """SIGKILL serve and every child mid-run, then start it again."""
    run_id = submit(api, SWEEP)
    mid_sweep(service, run_id, api)
    service.crash()
    service.start()
    return run_id


def fill_store(service: Service, api: httpx.Client, rng: random.Random) -> str:
    """Fill the store's disk mid-sweep until a write fails, then free it again."""
    run_id = submit(api, SWEEP)
    mid_sweep(service, run_id, api)
    ballast = service.store / "ballast"
    with contextlib.suppress(OSError), ballast.open("wb") as handle:
        block = b"\0" * 2**20
        while True:
            handle.write(block)
            handle.flush()
    before = sum(progress(service, run_id).values())
    with contextlib.suppress(AssertionError):
        wait_for(
            lambda: (
                sum(progress(service, run_id).values()) > before or _state(api, run_id) in ENDED
            ),
            5,
        )
    ballast.unlink()
    return run_id


HARMS: dict[str, Callable[[Service, httpx.Client, random.Random], str]] = {
    "kill-harness": kill_harness,
    "kill-worker": kill_child("celery-worker"),
    "kill-beat": kill_child("beat"),
    "kill-web": kill_child("web"),
    "kill-service": kill_service,
    "full-disk": fill_store,
}


# The service the rounds run against.


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` mounted on ``path`` for the block (the machine runs as root)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class Arena:
    """A serve of its own for the rounds of one harm (its store on a small tmpfs for a full
    disk); a context manager that starts and stops it."""

    def __init__(self, kind: str, folder: Path, seed: int = 0) -> None:
        self.kind = kind
        self.rng = random.Random(seed)
        self.home = folder / kind / "home"
        self.home.parent.mkdir(parents=True, exist_ok=True)
        self.stack = contextlib.ExitStack()
        self.service = Service(home=self.home, extra_env={"SIMRUN_POLL_S": "1"})

    def __enter__(self) -> Arena:
        with self.stack as stack:
            if self.kind == "full-disk":  # the store of the embedded default, on a small disk
                stack.enter_context(tmpfs(self.home / "store", STORE_MB))
            self.service.start()
            stack.callback(self._stop)
            self.api = stack.enter_context(self.service.client(self.service.user("chaos")))
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def _stop(self) -> None:
        if self.service.process is not None:
            self.service.stop()

    def play_round(self) -> Outcome:
        run_id = HARMS[self.kind](self.service, self.api, self.rng)
        return finish(self.service, self.api, run_id, self.kind)


def play(kind: str, rounds: int, folder: Path, seed: int = 0) -> Tally:
    """``rounds`` rounds of one harm against a serve of its own; their tally."""
    tally = Tally(kind)
    with Arena(kind, folder, seed) as arena:
        for _ in range(rounds):
            tally.outcomes.append(arena.play_round())
    return tally
