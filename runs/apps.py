from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "simrun"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The backends know the types runs' sources ship by name (runs.planning.learned_types).
        from runs.planning import learned_types

        learned_types.register()
