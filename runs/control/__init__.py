"""The control loop: the controller and what only it uses to follow the runs to their end.

What a backend's status means (states, observations), which runs a pass may leave alone, the
locks and flags of its processes, the operator's release of a reserved node, and the copy of
the work a resumed run reuses, done by its submission. It may import
``runs.planning`` (the records and images of a submission), ``runs.backends``, ``runs.common``
and the models; nothing of ``reads``, ``web``, ``api`` or ``cli``. The Celery tasks are handed
to it (``runs.common.handoff``), not imported.
"""
