"""Reads: what the API and the dashboard's pages both read of the record, the store and the
backend, and who may see it.

Access checks, the runs list (its filters, its pages, its rows as JSON), a run's tasks and
attempts, live attempts, a task's files and logs, the machines and their reservations, and
what the attempts used of their memory. It writes nothing. It may import ``runs.planning``
(the sizing policies that accounting replays), ``runs.backends``, ``runs.common`` and the
models; nothing of ``control``, ``web``, ``api`` or ``cli``.
"""
