"""The exceptions the harness raises and maps onto its exit codes."""


class ConfigurationError(Exception):
    """The environment or the settings of a worker are wrong (exit 4)."""


class UnitError(RuntimeError):
    """A unit failed in the function of the task type; it was released (exit 3)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"unit {index} failed")
        self.index = index


class Terminated(Exception):
    """The worker stopped on SIGTERM before its units were done (exit 143)."""
