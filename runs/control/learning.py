"""Learning the types of a run's sources (a run ``learning``: no tasks yet), then planning it.

The learner learns the users' runs in turn (``learn_in_turn``): one run of a user at a time,
and the next run learned is another user's whenever another user has one waiting, so a
user's slow sources delay only that user's runs (with ``SIMRUN_LEARNERS`` learnings at once,
a user never waits behind another's while a learner is free of them).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings

from runs.backends.base import Backend
from runs.common.errors import CannotRun
from runs.common.handoff import Schedule, learner
from runs.control import locks
from runs.control.backoff import push_aside, submission_grace
from runs.control.cancelling import CANCEL_TRIES
from runs.control.closing import close_run
from runs.control.submitting import SUBMISSION_TRIES
from runs.models import Run, RunState
from runs.planning import submission
from runs.planning.spec import SpecError

log = logging.getLogger(__name__)


def learn(run_id: str, *, backend: Backend | None = None, schedule: Schedule | None = None) -> bool:
    """Learn the types a ``learning`` run's sources ship, then plan and hand it on to its
    submission (``submission.plan_learned``); what cannot run fails the run, saying why
    (pip's last lines, the settings a type refused, a timeout). One process at a time learns
    a run: False when another one does."""
    with locks.hold(f"learn-{run_id}") as held:
        if not held:
            return False
        run = Run.objects.filter(pk=run_id, state=RunState.LEARNING).first()
        if run is None:
            return True
        try:
            submission.plan_learned(run, backend=backend, schedule=schedule)
        except SpecError as error:
            _fail_learning(
                run,
                "\n".join(f"{p}: {' '.join(m)}" for p, m in error.errors.items()),
                refused=error.errors,
            )
        except CannotRun as error:
            _fail_learning(run, str(error))
    return True


CANDIDATES = 500
"""The oldest runs waiting to be learned that one choice of the next looks at."""


def _owner_lock(owner_id: int) -> str:
    return f"learner-of-{owner_id}"


def learn_in_turn() -> int:
    """The learner's work: learn the runs waiting for it, each user's in turn and one of a
    user's at a time, until none is waiting whose user is not being served elsewhere; how
    many it learned. A message to the learner is a turn, not a run: a run waits for the
    turn of its user (the learning of a user's run held elsewhere goes on to the next of
    theirs when it ends)."""
    learned, last = 0, None
    while (run := _next_in_turn(last)) is not None:
        with locks.hold(_owner_lock(run.owner_id)) as mine:
            if not mine:
                continue  # taken by another learner meanwhile: it goes on with that user
            learn(run.id)
        learned, last = learned + 1, run.owner_id
    return learned


def _next_in_turn(last: int | None) -> Run | None:
    """The next run to learn: the oldest waiting one whose user is being served nowhere, of
    another user than ``last`` (served just now) while another has one waiting."""
    waiting = Run.objects.filter(state=RunState.LEARNING).order_by("created_at", "id")
    chosen, busy = None, set()
    for run in waiting.only("id", "owner_id")[:CANDIDATES]:
        if run.owner_id in busy or locks.held(f"learn-{run.id}"):
            continue
        if locks.held(_owner_lock(run.owner_id)):
            busy.add(run.owner_id)
            continue
        if run.owner_id != last:
            return run
        chosen = chosen or run
    return chosen


def _fail_learning(run: Run, message: str, refused: dict[str, list[str]] | None = None) -> None:
    """Fail a run whose sources' types could not be learned (a cancel meanwhile wins); a spec
    they refused keeps its problems by field (``Run.refused``), which ``simrun submit`` and
    ``Client.submit`` raise as the 400 of a type already known would be."""
    if refused:
        Run.objects.filter(pk=run.pk, state=RunState.LEARNING).update(refused=refused)
    for _ in range(CANCEL_TRIES):
        if run.state != RunState.LEARNING or close_run(run, [], RunState.FAILED, message):
            return
        fresh = Run.objects.filter(pk=run.pk).first()
        if fresh is None:
            return
        run = fresh


def resume_learning(run: Run, now: datetime) -> None:
    """Hand on the learning of a run that stopped (its worker died, the broker lost it); fail
    it after ``SUBMISSION_TRIES``. Left alone while it may still be queued or learning: for
    the longest a learning takes (``SIMRUN_LEARN_INSTALL_S`` and ``_DESCRIBE_S``)."""
    longest = settings.SIMRUN_LEARN_INSTALL_S + settings.SIMRUN_LEARN_DESCRIBE_S
    grace = submission_grace() + timedelta(seconds=longest)
    if run.reconcile_after is None and now - run.created_at < grace:
        return
    if locks.held(f"learn-{run.id}"):
        return
    if run.reconcile_failures >= SUBMISSION_TRIES:
        message = f"the learning of its sources did not complete after {SUBMISSION_TRIES} tries"
        _fail_learning(run, message)
        return
    log.info("the learning of run %s stopped; it is handed on again", run.id)
    push_aside(run, now, unavailable=True)
    try:
        learner()(run.id)
    except Exception:  # the broker: handed on again at the next try
        log.exception("cannot hand on the learning of run %s", run.id)
