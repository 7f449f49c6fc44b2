"""Sessions signed in by ``runs.user_backend`` now name its new place, ``runs.common``.

The module moved (issue 30); Django signs out a session whose backend is no longer
configured, so without this every user would be signed out by the upgrade.
"""

import importlib
from typing import Any

from django.db import migrations

OLD_PATH = "runs.user_backend.UserBackend"
PATH = "runs.common.user_backend.UserBackend"

rename_backend = importlib.import_module(
    "runs.migrations.0012_sessions_signed_in_by_the_user_backend"
).rename_backend


def forwards(apps: Any, schema_editor: Any) -> None:
    rename_backend(apps, OLD_PATH, PATH)


def backwards(apps: Any, schema_editor: Any) -> None:
    rename_backend(apps, PATH, OLD_PATH)


class Migration(migrations.Migration):
    dependencies = [("runs", "0015_run_spec_text")]

    operations = [migrations.RunPython(forwards, backwards)]
