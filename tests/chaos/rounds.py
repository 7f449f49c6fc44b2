"""Rounds of chaos against ``simrun serve`` with the local backend, and what each one left.

A round submits a ``squares`` sweep whose units sleep a little, does one harm while it runs
(a SIGKILL of a process of the run or of the service, a full disk), undoes what needs undoing
(a restart, free space) and waits for the run's end. The harm records whether it landed: it
found its victim (a process to kill, a disk to fill) while the run was live, and before the
run's ``ended_at``; with the run's state and the units done at that moment. A round whose harm
did not land (the run ended first) proves nothing: it is played again, up to ``TRIES`` times,
and never counted right.

It then counts what the harm cost: the run's end (succeeded is the right one: every harm here
is one a run must survive), units missing from ``progress.jsonl``, units done twice, and
whether the merged files are byte-identical to those of a clean run. A unit done twice is one
whose finished work was recorded twice: two lines of it in ``progress.jsonl``. A pool process
records its units every ``harness.pool.FLUSH_S`` and a SIGKILL loses what it had not recorded
yet, so computing a unit again after a kill is expected and leaves one line; a second line
means work the service had recorded as done was done again (or recorded twice), which no
harm excuses. A round of ``kill-service-resumed`` harms the resume of a sweep cancelled a
quarter of the way (docs/resume.md): a unit it reused (a piece the service copied into its
ledger) counts as done, and one it reused and computed too as done twice. A round of
``noisy-neighbour`` is played on a root serve with task users, its home a small tmpfs: another
user's task floods files and output while the sweep computes (issue 35), and must fail on its
own budget while the sweep ends right.
``tests/chaos`` runs a round of each kind; ``bench/chaos.py`` many, with figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

from harness.pieces import piece_units
from tests import floods
from tests.e2e.service import (
    ENDED,
    SIMRUN,
    Service,
    run_of,
    run_processes,
    service_processes,
    submit,
    task_user_venv,
)
from tests.polling import wait_for

UNITS = 48
DELAY_S = 0.1
SWEEP = {
    "name": "chaos",
    "tasks": {
        "sweep": {"type": "squares", "settings": {"n": UNITS, "delay_s": DELAY_S}, "workers": 2}
    },
}
SLOW_SWEEP = {
    **SWEEP,
    "tasks": {"sweep": {**SWEEP["tasks"]["sweep"], "settings": {"n": UNITS, "delay_s": 0.4}}},
}
"""The sweep of the rounds whose harm takes seconds to set up (another user's task to start):
the same units and output, about ten seconds of them."""
OUTPUTS = ("squares.json", "squares.csv")
END_TIMEOUT_S = 240.0
"""A run not ended this long after its harm is counted stuck."""
TRIES = 3
"""The runs a round submits at most for its harm to land on one of them."""
DISK_MB = 64
"""The size of the tmpfs of the full-disk rounds (the store's; the home's for full-home)."""
FULL_HOLD_S = 10.0
"""The longest a full disk is kept full, waiting for a write of the service to fail on it."""
MOMENTS = (UNITS // 4, UNITS)
"""The units done when the harms of the local run path land: mid-sweep, or as the sweep ends
(its worker merging, the step process noticing its end)."""
DISK_FULL = ("No space left", "disk is full", "ENOSPC", "Errno 28")
"""What the service's log says when a write failed on a full disk."""


@dataclass(frozen=True)
class Harm:
    """What one harm did: whether it found its victim while the run was live, and when (the
    wall clock, the run's state and the units done at that moment)."""

    landed: bool
    at: float = 0.0
    state: str = ""
    done: int = 0
    what: str = ""

    def describe(self) -> str:
        how = "landed" if self.landed else "missed"
        return f"{how} at {self.state or '?'} with {self.done}/{UNITS} done: {self.what}"


@dataclass
class Outcome:
    """What one round left."""

    kind: str
    state: str
    harm: Harm = field(default_factory=lambda: Harm(landed=False, what="none"))
    ended_at: float | None = None
    missing: int = 0
    twice: int = 0
    identical: bool = False
    tries: int = 1
    note: str = ""
    reused: int = 0
    """The units the run reused of the run it resumes (``RESUMED`` rounds)."""

    @property
    def landed(self) -> bool:
        """Whether the harm hit the run while it was live: found its victim, before the run's
        end as the service recorded it."""
        return self.harm.landed and (self.ended_at is None or self.harm.at < self.ended_at)

    @property
    def right(self) -> bool:
        return (
            self.landed
            and self.state == "succeeded"
            and not self.missing
            and not self.twice
            and self.identical
        )


@dataclass
class Tally:
    """The outcomes of the rounds of one kind."""

    kind: str
    outcomes: list[Outcome] = field(default_factory=list)

    def line(self) -> str:
        found = self.outcomes
        states = Counter(o.state for o in found)
        return (
            f"{self.kind:<14} rounds {len(found):>3}"
            f"  harms landed {sum(o.landed for o in found):>3}"
            f"  right {sum(o.right for o in found):>3}  stuck {states.get('stuck', 0):>2}"
            f"  units lost {sum(o.missing for o in found):>3}"
            f"  units twice {sum(o.twice for o in found):>3}  ends {dict(states)}"
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


def reused(service: Service, run_id: str) -> set[int]:
    """The units a resumed run reused (the pieces the service copied into its ledger's
    ``units/reused/``): done, and computed by none of its workers."""
    folder = task_dir(service, run_id) / "units" / "reused"
    names = os.listdir(folder) if folder.is_dir() else []
    return {u for name in names if (r := piece_units(name)) is not None for u in range(*r)}


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


def finish(
    service: Service, api: httpx.Client, run_id: str, kind: str, harm: Harm, tries: int = 1
) -> Outcome:
    """Wait for the run's end and count what the round cost."""
    deadline = time.monotonic() + END_TIMEOUT_S
    run = _run(api, run_id)
    while run.get("state") not in ENDED and time.monotonic() < deadline:
        time.sleep(0.2)
        run = _run(api, run_id)
    state = str(run["state"]) if run.get("state") in ENDED else "stuck"
    ended_at = run.get("ended_at")
    done = progress(service, run_id)
    given = reused(service, run_id)
    attempts = len(list((task_dir(service, run_id) / "logs").glob("*.exit")))
    return Outcome(
        kind=kind,
        state=state,
        harm=harm,
        ended_at=datetime.fromisoformat(ended_at).timestamp() if ended_at else None,
        missing=sum(1 for i in range(UNITS) if i not in done and i not in given),
        twice=sum(1 for count in done.values() if count > 1) + len(given & set(done)),
        identical=outputs(service, run_id) == expected(),
        tries=tries,
        reused=len(given),
        note=f"run {run_id}, {attempts} attempts, harm {harm.describe()}",
    )


def _run(api: httpx.Client, run_id: str) -> dict[str, object]:
    """The run; a web server that is restarting answers nothing for a moment."""
    try:
        return run_of(api, run_id)
    except (httpx.TransportError, AssertionError):
        return {"state": "unknown"}


def _state(api: httpx.Client, run_id: str) -> str:
    return str(_run(api, run_id)["state"])


def _resumed(service: Service, api: httpx.Client) -> str:
    """A resume of the sweep cancelled once a quarter of its units were done: the run a
    ``RESUMED`` round harms. A sweep that ended first is resumed as it ended."""
    source = _submit(api)
    mid_sweep(service, source, api)
    api.post(f"runs/{source}/cancel/")
    wait_for(lambda: _state(api, source) in ENDED, END_TIMEOUT_S, f"run {source} to end")
    answer = api.post("runs/", params={"resume_of": source})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _submit(api: httpx.Client, sweep: dict = SWEEP) -> str:
    """Submit the sweep, once the web server (perhaps started again) answers."""

    def submitted() -> str | None:
        try:
            return submit(api, sweep)
        except httpx.TransportError:
            return None

    return wait_for(submitted, 60, "the web server to take a submission")


# The harms: each waits for the run to be mid-sweep, harms it, and says whether it landed.

Strike = Callable[[], str | None]
"""Does the harm; what it hit, None when it found nothing to harm."""


def strike(service: Service, api: httpx.Client, run_id: str, act: Strike) -> Harm:
    """Do ``act`` if the run is still live; what it did and when."""
    state, done = _state(api, run_id), len(progress(service, run_id))
    at = time.time()
    if state in ENDED:
        return Harm(landed=False, at=at, state=state, done=done, what="the run had ended")
    what = act()
    return Harm(
        landed=what is not None,
        at=at,
        state=state,
        done=done,
        what=what or "nothing to harm, or nothing felt it",
    )


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


def kill(pid: int, name: str) -> str | None:
    """SIGKILL ``pid``; what was killed, None when it was gone already."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return f"SIGKILL {name} {pid}"


def harness_processes(service: Service, run_id: str) -> list[int]:
    """The run's ``simrun-worker`` processes and their pool processes."""
    found = run_processes(service.store, run_id)
    workers = {p for p in found if "simrun-worker" in _cmdline(p)}
    return sorted(workers | {p for p in found if _parent(p) in workers})


def kill_harness(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """SIGKILL a random worker or pool process of the run, mid-sweep."""
    if not mid_sweep(service, run_id, api):
        return strike(service, api, run_id, lambda: None)

    def act() -> str | None:
        found = harness_processes(service, run_id)
        if not found:
            return None
        victim = rng.choice(found)
        return kill(victim, "worker" if "simrun-worker" in _cmdline(victim) else "pool process")

    return strike(service, api, run_id, act)


def launchers(service: Service, run_id: str) -> list[int]:
    """The live launchers of the run's attempts (``backends/local/launcher.py <fd> <fd>``), found by
    the pid files in its ``logs/`` folder: their command line names no run."""
    found = []
    for path in (task_dir(service, run_id) / "logs").glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = json.loads(path.read_text()).get("launcher")
            if pid and "backends/local/launcher.py" in _cmdline(pid):
                found.append(int(pid))
    return sorted(found)


def kill_launcher(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """SIGKILL the launcher of one of the run's workers, mid-sweep or as its units are all
    done (the worker goes on, or is merging)."""
    if not mid_sweep(service, run_id, api, rng.choice(MOMENTS)):
        return strike(service, api, run_id, lambda: None)

    def act() -> str | None:
        found = launchers(service, run_id)
        return kill(rng.choice(found), "launcher") if found else None

    return strike(service, api, run_id, act)


SERVICE_CHILDREN = {
    "celery-worker": lambda line: "celery" in line and " worker " in line,
    "beat": lambda line: "celery" in line and " beat " in line,
    "web": lambda line: "gunicorn" in line,
    "local": lambda line: "django simrun_steps" in line,
}


def service_child(service: Service, which: str) -> int | None:
    """The main process of one child of serve (not one of its own children)."""
    assert service.process is not None
    matches = SERVICE_CHILDREN[which]
    found = [p for p in service_processes(service.process.pid) if matches(_cmdline(p))]
    return next((p for p in found if _parent(p) == service.process.pid), None)


def kill_child(which: str) -> Callable[[Service, httpx.Client, random.Random, str], Harm]:
    """SIGKILL one child of serve mid-run; serve starts it again."""

    def harm(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
        # The step process starts and ends attempts: it is killed at either moment too.
        mid_sweep(service, run_id, api, rng.choice(MOMENTS) if which == "local" else UNITS // 4)

        def act() -> str | None:
            pid = service_child(service, which)
            return kill(pid, which) if pid is not None else None

        return strike(service, api, run_id, act)

    harm.__doc__ = f"SIGKILL serve's {which} mid-run; serve starts it again."
    return harm


def kill_service(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """SIGKILL serve and every child mid-run, then start it again."""
    mid_sweep(service, run_id, api)

    def act() -> str:
        service.crash()
        return "SIGKILL of serve's process group"

    done = strike(service, api, run_id, act)
    if service.process is None:
        service.start()
    return done


def fill(ballast: Path) -> int:
    """Write ``ballast`` until its disk is full; the MiB written (the disk is full when the
    last write failed)."""
    written = 0
    with contextlib.suppress(OSError), ballast.open("wb") as handle:
        block = b"\0" * 2**20
        while True:
            handle.write(block)
            handle.flush()
            written += 1
    return written


def fill_store(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """Fill the store's disk mid-sweep until a write fails, hold it full a moment, free it."""
    mid_sweep(service, run_id, api)
    ballast = service.store / "ballast"

    def act() -> str:
        mib = fill(ballast)
        before = sum(progress(service, run_id).values())
        # Held until a worker managed to record a unit anyway (the space a file freed), or
        # for FULL_HOLD_S / 2: the workers' writes fail meanwhile.
        with contextlib.suppress(AssertionError):
            wait_for(
                lambda: (
                    sum(progress(service, run_id).values()) > before or _state(api, run_id) in ENDED
                ),
                FULL_HOLD_S / 2,
            )
        return f"store full ({mib} MiB of ballast)"

    try:
        return strike(service, api, run_id, act)
    finally:
        ballast.unlink(missing_ok=True)


def fill_home(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """Fill the disk of the database and the broker (the home's) mid-sweep and hold it full
    until the service's log says a write failed on it and the run's worker has ended (its end
    is to be recorded on the full disk), at most ``FULL_HOLD_S``; then free it. It landed if a
    write of the service failed."""
    mid_sweep(service, run_id, api)
    ballast = service.home / "ballast"
    logs = task_dir(service, run_id) / "logs"
    logged = service.log.stat().st_size

    def felt() -> bool:
        with service.log.open("rb") as log:
            log.seek(logged)
            text = log.read().decode(errors="replace")
        return any(sign in text for sign in DISK_FULL)

    def act() -> str | None:
        mib = fill(ballast)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: felt() and any(logs.glob("*.exit")), FULL_HOLD_S, interval_s=0.2)
        if not felt():
            return None
        ended = "after" if any(logs.glob("*.exit")) else "before"
        return f"home full ({mib} MiB of ballast), a write failed, freed {ended} a worker's end"

    try:
        return strike(service, api, run_id, act)
    finally:
        ballast.unlink(missing_ok=True)


NOISY = {
    "SIMRUN_TASK_UID_BASE": "370000",
    "SIMRUN_TASK_FILES_MAX": "2000",
    "SIMRUN_TASK_LOG_MB": "1",
    "SIMRUN_TASK_FILES_CHECK_S": "0.3",
    "SIMRUN_LOCAL_CORES": "3",
}
"""The noisy-neighbour arena's settings: task users, small budgets of files and log, and a core
for the flood beside the sweep's two workers."""
NOISY_DISK_MB, NOISY_INODES = 256, 30_000
"""The home's tmpfs (database, broker, store and scratch): a flood without budgets takes every
inode of it, and a log without a cap every byte."""
NOISE = """
import os, pathlib, sys, time
out = pathlib.Path(os.environ["SIMRUN_OUT"])
(out / "ready").write_text("")
deadline = time.monotonic() + 120
while not (out / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
line = b"noise " * 2730 + b"\\n"
for i in range(10**6):
    open(out / f"f{i}", "w").close()
    sys.stdout.buffer.write(line)
"""
"""Another user's task: once told to, it makes empty files in its out/ and prints 16 KiB a file,
as fast as it can, until a budget stops it (or the disk is full)."""
NOISE_BUDGET = "SIMRUN_TASK_FILES_MAX"
"""What the flood's run must fail naming."""


def noisy_neighbour(service: Service, api: httpx.Client, rng: random.Random, run_id: str) -> Harm:
    """Another user's task floods files and output while the sweep computes: told to once the
    sweep is mid-sweep; landed when its flood was seen under way (files made, its log written)
    while the sweep was live. What it cost its own run (the budget it failed on, its log's
    bytes) is in the harm's account."""
    with service.client(_neighbour(service)) as noisy:
        noise = submit(noisy, {"tasks": {"noise": {"command": ["/usr/bin/python3", "-c", NOISE]}}})
        folder = service.store / "runs" / noise / "tasks" / "noise"
        out = folder / "out"
        wait_for(lambda: (out / "ready").exists(), END_TIMEOUT_S, f"noise {noise} to start")
        mid_sweep(service, run_id, api)
        (out / "go").touch()

        def under_way() -> bool:
            return _files(out) >= 200 or _state(noisy, noise) in ENDED

        wait_for(under_way, END_TIMEOUT_S, f"noise {noise} to flood")
        at, state, done = time.time(), _state(api, run_id), len(progress(service, run_id))
        began = _files(out) >= 200
        ended: dict = {"state": "not ended", "tasks": []}
        with contextlib.suppress(AssertionError):  # a service the flood took down: the sweep's
            ended = wait_for(  # end says what it cost
                lambda: (r := _run(noisy, noise)).get("state") in ENDED and r,
                END_TIMEOUT_S,
            )
    told = next((t["message"] for t in ended["tasks"] if t["id"] == "noise"), "")
    log = folder / "logs" / "noise-0.log"
    kept = log.stat().st_size if log.exists() else 0
    what = (
        f"user noisy's flood (run {noise}) {'began' if began else 'never began'}; it "
        f"{ended['state']}: {told!r}; its log kept {kept / 2**20:.2f} MiB"
    )
    return Harm(landed=began and state not in ENDED, at=at, state=state, done=done, what=what)


_NEIGHBOURS: dict[Path, str] = {}


def _neighbour(service: Service) -> str:
    """The token of the noisy user of a service, made at its first round."""
    if service.home not in _NEIGHBOURS:
        _NEIGHBOURS[service.home] = service.user("noisy")
    return _NEIGHBOURS[service.home]


def _files(folder: Path) -> int:
    """The entries of a folder, 0 when it is gone."""
    try:
        return sum(1 for _ in os.scandir(folder))
    except OSError:
        return 0


Harming = Callable[[Service, httpx.Client, random.Random, str], Harm]

RESUMED = frozenset({"kill-service-resumed"})
"""The harms done to a resumed run (``_resumed``): it loses nothing it reused or computes."""
NEIGHBOURS = frozenset({"noisy-neighbour"})
"""The harms another user's task does: their arena's serve is root's, with task users."""
OWN_ARENA = frozenset({"full-disk", "full-home"}) | NEIGHBOURS
"""The harms whose arena is made for them (a small disk, task users); a serve of the
others' arena may take their rounds one after another (``Arena.play_round``'s kind)."""

HARMS: dict[str, Harming] = {
    "kill-harness": kill_harness,
    "kill-launcher": kill_launcher,
    "kill-local": kill_child("local"),
    "kill-worker": kill_child("celery-worker"),
    "kill-beat": kill_child("beat"),
    "kill-web": kill_child("web"),
    "kill-service": kill_service,
    "kill-service-resumed": kill_service,
    "full-disk": fill_store,
    "full-home": fill_home,
    "noisy-neighbour": noisy_neighbour,
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
    """A serve of its own for the rounds of one harm (a disk of the full-disk rounds on a small
    tmpfs); a context manager that starts and stops it."""

    def __init__(self, kind: str, folder: Path, seed: int = 0) -> None:
        self.kind = kind
        self.rng = random.Random(seed)
        self.folder = folder / kind
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stack = contextlib.ExitStack()
        env = {"SIMRUN_POLL_S": "1"}
        simrun = SIMRUN
        if kind == "full-home":  # the store (and scratch beside it) off the home's disk
            env["SIMRUN_STORE"] = str(folder / kind / "store")
        if kind in NEIGHBOURS:
            # Task users must cross every folder above the home and reach a Python: a folder
            # of /tmp that is theirs to cross (the test's may be root's alone), and a venv of
            # the machine's Python.
            self.base = Path(tempfile.mkdtemp(prefix=f"simrun-chaos-{kind}-", dir="/tmp"))
            self.base.chmod(0o755)
            self.stack.callback(shutil.rmtree, self.base, ignore_errors=True)
            simrun = str(task_user_venv(self.base))
            env.update(NOISY)
        self.home = (self.base if kind in NEIGHBOURS else self.folder) / "home"
        self.service = Service(home=self.home, extra_env=env, simrun=simrun)

    def __enter__(self) -> Arena:
        with self.stack as stack:
            if self.kind == "full-disk":  # the store of the embedded default, on a small disk
                stack.enter_context(tmpfs(self.home / "store", DISK_MB))
            if self.kind == "full-home":  # the database, the broker and all of the home
                stack.enter_context(tmpfs(self.home, DISK_MB))
            if self.kind in NEIGHBOURS:  # a home whose inodes and bytes a flood could take
                stack.enter_context(floods.tmpfs(self.home, NOISY_DISK_MB, NOISY_INODES))
                stack.callback(self._keep_log)
            self.service.start()
            stack.callback(self._stop)
            self.api = stack.enter_context(self.service.client(self.service.user("chaos")))
            self.stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def _keep_log(self) -> None:
        """The service's log beside the arena's other files (its home is removed)."""
        with contextlib.suppress(OSError):
            shutil.copy(self.service.log, self.folder / self.service.log.name)

    def _stop(self) -> None:
        if self.service.process is not None:
            self.service.stop()

    def play_round(self, kind: str = "") -> Outcome:
        """Submit a run and harm it (the arena's harm, or ``kind``, one not of
        ``OWN_ARENA``); again (``TRIES`` runs at most) while the harm missed."""
        kind = kind or self.kind
        assert kind == self.kind or kind not in OWN_ARENA, f"{kind} needs an arena of its own"
        missed: list[str] = []
        for tries in range(1, TRIES + 1):
            if kind in RESUMED:
                run_id = _resumed(self.service, self.api)
            elif kind in NEIGHBOURS:
                run_id = _submit(self.api, SLOW_SWEEP)
            else:
                run_id = _submit(self.api)
            harm = HARMS[kind](self.service, self.api, self.rng, run_id)
            outcome = finish(self.service, self.api, run_id, kind, harm, tries)
            if outcome.landed:
                break
            missed.append(f"missed on {outcome.note}")
        if missed:
            outcome.note = "; ".join([outcome.note, *missed])
        return outcome


def play(kind: str, rounds: int, folder: Path, seed: int = 0) -> Tally:
    """``rounds`` rounds of one harm against a serve of its own; their tally."""
    tally = Tally(kind)
    with Arena(kind, folder, seed) as arena:
        for _ in range(rounds):
            tally.outcomes.append(arena.play_round())
    return tally
