"""Every Slurm command of the backend goes through ``run``: one place for the timeout, the
``SLURM_CONF`` to read, the busy controller's errors and the count of calls.

A controller that is busy or restarting answers "Socket timed out" or "Unable to contact
slurm controller"; such an answer, a timeout or a rate limit raises ``BackendUnavailable``,
so the control loop backs off and nothing is lost or failed.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from runs.backends.base import BackendUnavailable

BUSY = re.compile(
    r"socket timed out|unable to contact slurm controller|slurm_persist_conn_open"
    r"|connection refused|rate limit|resource temporarily unavailable|try again"
    r"|slurmctld.*(busy|not responding)|communications connection failure",
    re.IGNORECASE,
)
"""Slurm's words for a controller that cannot answer now."""
ENV_KEPT = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "USER", "LOGNAME", "SLURM_CONF")
"""The service's environment a Slurm command gets: none of its secrets; a site's
``SLURM_CONF`` too, as its own commands read it."""


class SlurmError(RuntimeError):
    """A Slurm command refused what it was asked (a bad partition, an unknown job)."""


@dataclass
class Slurm:
    """How the backend calls Slurm: ``conf`` is the slurm.conf (empty: the service's
    ``SLURM_CONF``, else Slurm's default)."""

    conf: str = ""
    timeout_s: float = 30.0
    calls: Counter[str] = field(default_factory=Counter)
    """Calls per command since the start, for the benchmark and the tests."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each command since the start."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def env(self) -> dict[str, str]:
        """The environment of a Slurm command."""
        env = {key: os.environ[key] for key in ENV_KEPT if key in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, argv: list[str], *, timeout_s: float | None = None, stdin: str = "") -> str:
        """The standard output of a Slurm command; BackendUnavailable when the controller
        cannot answer now, SlurmError when the command refused."""
        with self._lock:
            self.calls[argv[0]] += 1
        began = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout_s or self.timeout_s,
                env=self.env(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"{argv[0]} did not answer within {timeout_s or self.timeout_s:g} s"
            ) from None
        except FileNotFoundError:
            raise BackendUnavailable(f"{argv[0]} is not installed on this host") from None
        finally:
            with self._lock:
                spent = time.monotonic() - began
                self.seconds[argv[0]] = self.seconds.get(argv[0], 0.0) + spent
        error = done.stderr.strip()
        if BUSY.search(error) and (done.returncode != 0 or not done.stdout.strip()):
            raise BackendUnavailable(f"{argv[0]}: {last_line(error)}")
        if done.returncode != 0:
            raise SlurmError(f"{argv[0]}: {last_line(error) or f'exit {done.returncode}'}")
        return done.stdout


def last_line(text: str) -> str:
    """The last line of a command's error output, without Slurm's ``sbatch: error:`` prefix."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return re.sub(r"^\S+: error: ", "", lines[-1]).strip()
