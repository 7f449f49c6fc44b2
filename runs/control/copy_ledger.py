"""What the copies of one owner's live runs take together: the budget of reuse is the owner's.

The cache and a resume copy an earlier task's work into a new run (``runs.control.reuse``),
by the service, at no cost to any task: budgeted per run, an owner's many submissions at once
would each copy up to the budget. So the copies of all the owner's live runs (not ended: a
run's copies are its outputs once it ends, as a task's are) count together against
``SIMRUN_REUSE_MAX_GB`` and ``SIMRUN_REUSE_MAX_FILES``, by the blocks they take on disk
(``runs.control.copying``).

Each run's copies are one small file of the service's in ``<store>/reused/<owner>/``, named
by the run, written once its copies are made; the files of ended (or gone) runs are removed
when the ledger is summed. One owner's submissions copy in turn (a lock file in that folder,
held while a run's copies are made), so none can spend what another is spending.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

from harness import untrusted
from runs.common import store
from runs.control.copying import Budget
from runs.models import ENDED_STATES, Run

FOLDER = "reused"
LOCK = ".lock"
ENTRY_BYTES = 4096


@contextlib.contextmanager
def _folder(owner_id: int) -> Iterator[int]:
    """A descriptor of the owner's ledger folder, the service's alone, made if missing."""
    ledgers = untrusted.service_dir(store.root(), FOLDER)
    try:
        folder = untrusted.service_dir(ledgers, str(owner_id))
    finally:
        os.close(ledgers)
    try:
        os.fchmod(folder, 0o700)
        yield folder
    finally:
        os.close(folder)


@contextlib.contextmanager
def owners_budget(run: Run) -> Iterator[Budget]:
    """The budget of a run's copies with what the owner's live runs copied already spent
    (this run's earlier copies among them: a submission resumed after a crash), held under
    the owner's lock; what this run then spends is added to its entry at the end."""
    with (
        _folder(run.owner_id) as folder,
        os.fdopen(untrusted.open_own(folder, LOCK, mode=0o600), "ab") as lock,
    ):
        fcntl.flock(lock, fcntl.LOCK_EX)
        spent = _spent(folder)
        budget = Budget.from_settings()
        budget.bytes, budget.files = spent.get(run.id, (0, 0))
        others = [value for name, value in spent.items() if name != run.id]
        budget.bytes += sum(size for size, _ in others)
        budget.files += sum(files for _, files in others)
        before = budget.bytes, budget.files
        try:
            yield budget
        finally:
            mine = spent.get(run.id, (0, 0))
            total = (mine[0] + budget.bytes - before[0], mine[1] + budget.files - before[1])
            if total != (0, 0):
                record = json.dumps({"bytes": total[0], "files": total[1]})
                untrusted.write_atomic_at(folder, f"{run.id}.json", record, mode=0o600)


def _spent(folder: int) -> dict[str, tuple[int, int]]:
    """The bytes and files copied by each live run of the ledger (its folder's descriptor);
    entries of runs ended or gone are removed."""
    found: dict[str, tuple[int, int]] = {}
    for entry in untrusted.entries(folder):
        if not entry.name.endswith(".json") or not entry.is_file:
            continue
        try:
            with untrusted.open_regular(folder, entry.name) as handle:
                data = json.loads(handle.read(ENTRY_BYTES))
            found[entry.name.removesuffix(".json")] = (int(data["bytes"]), int(data["files"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    live = set(
        Run.objects.filter(pk__in=list(found)).exclude(state__in=ENDED_STATES)
        .values_list("pk", flat=True)
    )  # fmt: skip
    for name in set(found) - live:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{name}.json", dir_fd=folder)
        del found[name]
    return found
