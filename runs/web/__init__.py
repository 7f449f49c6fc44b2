"""The dashboard: its views, and what only its pages compute (the DAG, the timeline, the charts,
the runs table), with the middleware that guards the service's edge.

A top room beside ``runs.api`` and ``runs.cli``: it may import ``runs.reads``, ``control``,
``planning``, ``backends``, ``common``, the models and the template tags, and nothing of
``api``, ``cli``, ``client`` or the Celery tasks (what it shares with the API, the runs list
and a task's file answers, is in ``runs.reads``); nothing imports it but ``runs.urls`` and
the settings.
"""
