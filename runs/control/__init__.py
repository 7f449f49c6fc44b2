"""The control loop: follows the runs to their end, one step a module.

``reconciling`` is the pass over the live runs; ``polling`` maps one run's workflow status onto
its record (``states`` decides, ``failures`` reads its failed attempts); ``log_keeping`` keeps
the logs of its tasks and records their reports (``reports``, ``observations``); ``settling``
retries a terminal run's pending work; ``closing`` writes a run terminal, ``cancelling`` a
user's cancel; ``submitting`` and ``learning`` start a run, ``recovery`` resumes what a stopped
service left; ``waking`` makes the loop reconcile now, ``backoff`` leaves a failing run aside.
Beside them: which runs a pass may leave alone (``poll_memory``), the locks and flags of the
loop's processes, the operator's release of a reserved node, and the copy of the work a
resumed run reuses. It may import ``runs.planning`` (the records and images of a submission),
``runs.backends``, ``runs.common`` and the models; nothing of ``reads``, ``web``, ``api`` or
``cli``. The Celery tasks are handed to it (``runs.common.handoff``), not imported.
"""
