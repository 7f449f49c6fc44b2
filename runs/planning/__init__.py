"""Planning: from a run's spec to its planned tasks, and what sizing learns from past runs.

The spec and its validation, submission, the planner and its sizing policies with their
evidence, the records the backends read, images, task types learned from snapshots, snapshots,
re-runs, the keys that say which tasks are the same. It may import ``runs.common``,
``runs.backends`` (the protocol, and the local environments that learned types are installed
in) and the models; nothing of ``control``, ``reads``, ``web``, ``api`` or ``cli``: it hands a
submission on through ``Schedule``.
"""
