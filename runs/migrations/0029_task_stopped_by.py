from typing import Any

from django.db import migrations, models

STOPPED_WHILE_IT_RAN = "stopped while it ran: "
"""The start of the message the control loop gave a task its run's end stopped while it ran
(``runs.choices.STOPPED_WHILE_IT_RAN``), copied: a migration must not change with it."""


def fill_stopped_by(apps: Any, schema_editor: Any) -> None:
    """The tasks marked stopped before the field named how: the run's message after the start
    says it (a cancel's begins "cancelled"), read once here and never again."""
    tasks = apps.get_model("runs", "Task").objects.filter(stopped_while_running=True)
    cancelled = f"{STOPPED_WHILE_IT_RAN}cancelled"
    tasks.filter(message__startswith=cancelled).update(stopped_by="cancelled")
    tasks.exclude(message__startswith=cancelled).update(stopped_by="failed")


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0028_task_units_failed_run_tags_note'),
    ]

    operations = [
        migrations.AddField(
            model_name='task',
            name='stopped_by',
            field=models.CharField(blank=True, choices=[('cancelled', "its run's cancel"), ('failed', "its run's failure")], default='', help_text='Skipped because its run ended (so) while it ran: it did run, its units done kept.', max_length=16),
        ),
        migrations.RunPython(fill_stopped_by, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='task',
            name='stopped_while_running',
        ),
    ]
