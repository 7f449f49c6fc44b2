"""The Celery app of the service, configured from the Django settings (``CELERY_*``).

The beat schedule of the control loop (reconcile, settle) is ``CELERY_BEAT_SCHEDULE``.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

app = Celery("simrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])
