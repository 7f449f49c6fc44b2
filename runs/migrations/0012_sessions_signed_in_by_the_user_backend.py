"""Sessions signed in through Django's model backend now name runs.user_backend's.

A session names the backend that signed its user in, and Django signs out a session whose
backend is no longer configured: without this, every user would be signed out by the upgrade.
"""

from typing import Any

from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import migrations
from django.utils import timezone

DJANGO_PATH = "django.contrib.auth.backends.ModelBackend"
PATH = "runs.user_backend.UserBackend"


def rename_backend(apps: Any, old: str, new: str) -> None:
    """Rewrite the live sessions signed in by ``old`` to name ``new``."""
    store = SessionStore()
    sessions = apps.get_model("sessions", "Session")
    for session in sessions.objects.filter(expire_date__gt=timezone.now()).iterator():
        data = store.decode(session.session_data)  # {} when it does not verify
        if data.get(BACKEND_SESSION_KEY) == old:
            data[BACKEND_SESSION_KEY] = new
            session.session_data = store.encode(data)
            session.save(update_fields=["session_data"])


def forwards(apps: Any, schema_editor: Any) -> None:
    rename_backend(apps, DJANGO_PATH, PATH)


def backwards(apps: Any, schema_editor: Any) -> None:
    rename_backend(apps, PATH, DJANGO_PATH)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0011_run_list_indexes_carry_the_name"),
        ("sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
