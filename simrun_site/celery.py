"""The Celery app of the service, configured from the Django settings (``CELERY_*``)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

app = Celery("simrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])


@app.on_after_finalize.connect
def _schedule(sender: Celery, **kwargs: object) -> None:
    """The beat schedule of the control loop: reconcile and settle (see runs/tasks.py)."""
    from django.conf import settings

    sender.conf.beat_schedule = {
        "reconcile": {"task": "runs.tasks.reconcile", "schedule": settings.SIMRUN_POLL_S},
        "settle": {"task": "runs.tasks.settle", "schedule": settings.SIMRUN_SETTLE_S},
    }
