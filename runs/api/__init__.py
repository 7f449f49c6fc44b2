"""The REST API of simrun (Django REST framework): runs, tasks, the library, the cluster, tokens.

Its views submit through ``runs.planning``, cancel and release through ``runs.control``, and
answer with ``runs.reads``; it may import those, ``runs.common`` and the models, and nothing of
``web``, ``cli``, ``client`` or the Celery tasks. What the pages read alike (the runs list,
a task's file answers) is in ``runs.reads``, not here.
"""
