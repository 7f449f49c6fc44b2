"""The Slurm backend takes every setting of its own from the environment (``SIMRUN_SLURM_*``,
read into the Django settings), and its commands the site's ``SLURM_CONF``."""

from __future__ import annotations

from pathlib import Path

from runs.backends.slurm.backend import SlurmBackend
from runs.backends.slurm.commands import Slurm
from tests.backends.slurm_cluster import PARTITION, cluster


def test_the_backend_of_the_settings_takes_each_of_its_periods_and_limits(
    settings, tmp_path: Path
) -> None:
    settings.SIMRUN_STORE = tmp_path
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # sinfo fails at once (a missing one is waited for, a minute)
    settings.SIMRUN_SLURM_CONF = str(conf)
    settings.SIMRUN_SLURM_PARTITION, settings.SIMRUN_SLURM_ACCOUNT = "long", "physics"
    settings.SIMRUN_SLURM_SBATCH_ARGS = "--constraint=avx2 --exclude='n7'"
    settings.SIMRUN_SLURM_POLL_S = 45.0
    settings.SIMRUN_SLURM_SUBMIT_TIMEOUT_S = 20.0
    settings.SIMRUN_SLURM_PENDING_TIMEOUT_S = 90.0

    backend = SlurmBackend.from_settings()

    assert (backend.where.partition, backend.where.account) == ("long", "physics")
    assert backend.where.extra == ("--constraint=avx2", "--exclude=n7")
    assert (backend.poll_s, backend.pending_timeout_s) == (45.0, 90.0)
    assert backend.submitter.submit_timeout_s == 20.0
    assert backend.max_cores is None, "a Slurm that does not answer is not read"


def test_the_commands_read_the_services_slurm_conf_when_no_setting_names_one(monkeypatch) -> None:
    """A site whose ``slurm.conf`` is not at Slurm's default says so in ``SLURM_CONF``, as
    for its own commands (``.ci/slurm``'s clusters are both off the default)."""
    monkeypatch.setenv("SLURM_CONF", cluster())

    nodes = Slurm().run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N"])

    assert sorted(set(nodes.split())) == ["n1", "n2"]
