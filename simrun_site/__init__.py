"""The Django project of the simrun service."""

from simrun_site.celery import app as celery_app

__all__ = ["celery_app"]
