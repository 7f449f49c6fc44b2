"""The static files middleware: WhiteNoise, whose listing of the apps' static files is made
once per process.

WhiteNoise lists the files of every app's ``static`` folder (Django's finders, since simrun
serves them without ``collectstatic``) each time its middleware is made, 26 ms here: once per
web process, but once per client in the tests, whose every ``Client`` builds a middleware
chain of its own. The files ship with the code, so a process lists them once; what WhiteNoise
keeps of each file (its path and headers) is read-only once made, so the middlewares of a
process share it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):  # type: ignore[misc]  # whitenoise has no types
    """WhiteNoise with the apps' static files found once per process."""

    files: dict[str, Any]
    """WhiteNoise's: the files it serves, by URL."""
    found: ClassVar[dict[str, Any] | None] = None
    """The files the finders listed, by URL, once listed."""

    def add_files_from_finders(self) -> None:
        """Add the files the finders list, listed at the first call of the process."""
        if StaticFilesMiddleware.found is None:
            own, self.files = self.files, {}
            super().add_files_from_finders()
            StaticFilesMiddleware.found, self.files = self.files, own
        self.files.update(StaticFilesMiddleware.found)
