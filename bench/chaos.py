"""The chaos benchmark: many rounds of each harm ``simrun serve`` must survive, and what they cost.

Each harm gets a serve of its own (tests/chaos/rounds.py): a SIGKILL of a random worker or
pool process of a sweep (kill-harness); of the launcher of one of its workers (kill-launcher);
of serve's step process of the local backend (kill-local), of the Celery worker, of beat, of
the web server (serve starts them again); of the whole service, then a start (kill-service),
and so of a resumed run (kill-service-resumed: a sweep cancelled a quarter of the way, then
resumed, docs/resume.md);
a full store during a sweep (a tmpfs, root only; full-disk); a full disk under the database
and the broker (the home on a tmpfs, the store elsewhere; full-home); another user's task
flooding files and output while the sweep runs (a root serve with task users, the home a small
tmpfs; noisy-neighbour); ``--stalled-api N``: N
rounds of a Kubernetes API that stops answering under the controller and the Argo backend
(tests/chaos/test_stalled_api.py, under pytest). Rounds go harm after harm, so a run cut short
still has figures for each.

A round counts only if its harm landed (found its victim while the run was live); one that
missed is played again on a new run, at most ``TRIES`` times. Prints a line per round and a
tally per harm: rounds, harms landed, runs that reached the right end (the harm landed; the
run succeeded with every unit in the merged output, byte-identical to a clean run, and no unit
recorded done twice), stuck (not ended after 240 s), units lost, units done twice.

Run: ``.venv/bin/python bench/chaos.py --rounds 20`` (``--kinds kill-web,full-disk`` for some).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STALLED_API = "tests/chaos/test_stalled_api.py"

from tests.chaos.rounds import HARMS, Arena, Tally  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(HARMS), help="harms, comma-separated")
    parser.add_argument("--minutes", type=float, default=0, help="stop starting rounds after")
    parser.add_argument(
        "--stalled-api", type=int, default=0, help="rounds of a stalled Kubernetes API (pytest)"
    )
    parser.add_argument(
        "--folder", type=Path, help="where the services' homes and logs go (kept); a temp dir"
    )
    args = parser.parse_args()
    kinds = [kind for kind in args.kinds.split(",") if kind]
    tallies = {kind: Tally(kind) for kind in kinds}
    started = time.monotonic()
    with (
        (
            contextlib.nullcontext(str(args.folder))
            if args.folder
            else tempfile.TemporaryDirectory(prefix="simrun-chaos-")
        ) as tmp,
        contextlib.ExitStack() as stack,
    ):
        arenas = {
            kind: stack.enter_context(Arena(kind, Path(tmp), seed=i))
            for i, kind in enumerate(kinds)
        }
        for number in range(1, args.rounds + 1):
            if args.minutes and time.monotonic() - started > args.minutes * 60:
                print(f"time is up after {number - 1} rounds of each harm", flush=True)
                break
            for kind in kinds:
                outcome = arenas[kind].play_round()
                tallies[kind].outcomes.append(outcome)
                print(
                    f"round {number:>2} {kind:<14} {outcome.state:<10} right {outcome.right!s:<5} "
                    f"landed {outcome.landed!s:<5} (try {outcome.tries}) lost {outcome.missing} "
                    f"twice {outcome.twice} identical {outcome.identical} ({outcome.note})",
                    flush=True,
                )
    print(f"\nchaos: {(time.monotonic() - started) / 60:.1f} min")
    for tally in tallies.values():
        print(tally.line())
    if args.stalled_api:
        print(stalled_api(args.stalled_api))


def stalled_api(rounds: int) -> str:
    """The rounds of a stalled Kubernetes API: the chaos test's, under pytest (it needs a
    database: ``DATABASE_URL``), and the figures it prints."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", STALLED_API],
        cwd=ROOT,
        env={**os.environ, "SIMRUN_CHAOS_ROUNDS": str(rounds)},
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("stalled-api")]
    return lines[0] if lines else f"stalled-api: the rounds failed\n{done.stdout[-3000:]}"


if __name__ == "__main__":
    main()
