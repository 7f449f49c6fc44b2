"""The Celery app of the service, configured from the Django settings (``CELERY_*``).

The beat schedule of the control loop (reconcile, settle) is ``CELERY_BEAT_SCHEDULE``.
"""

from __future__ import annotations

import logging
import os
from logging.config import dictConfig
from typing import Any

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")

app = Celery("simrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])


@setup_logging.connect  # type: ignore[untyped-decorator]  # celery ships no types
def log_as_the_service(**kwargs: Any) -> None:
    """The worker and beat log as the web server does (``LOGGING``), Python's warnings once."""
    from django.conf import settings

    dictConfig(settings.LOGGING)
    logging.captureWarnings(True)
