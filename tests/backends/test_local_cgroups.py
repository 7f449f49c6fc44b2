"""Which memory cgroups the local backend can create: v1, v2, or none, found at run time.

The hierarchies here are trees of plain files laid out as the kernel shows them (a v2
machine cannot be had on this v1 one); the real v1 controller of this machine is used by
``test_local_memory.py``.
"""

from __future__ import annotations

from pathlib import Path

from runs.backends.local import cgroups


def fake_proc(root: Path, cgroup: str, mountinfo: str) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mountinfo)
    return proc


def v2_machine(tmp_path: Path, subtree: str = "") -> tuple[Path, Path]:
    """A cgroup v2 machine whose process is in /service, memory delegated to it."""
    mount = tmp_path / "sys/fs/cgroup"
    own = mount / "service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "memory.stat").write_text("anon 0\n")
    (own / "cgroup.subtree_control").write_text(subtree)
    proc = fake_proc(
        tmp_path,
        "0::/service\n",
        f"35 24 0:30 / {mount} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
    )
    return proc, own


def test_a_v2_machine_gets_memory_cgroups_below_the_service_with_memory_delegated(tmp_path):
    proc, own = v2_machine(tmp_path)
    hierarchy = cgroups.detect(proc)
    assert hierarchy == cgroups.Hierarchy(2, own / "simrun")
    assert (own / "cgroup.subtree_control").read_text() == "+memory"
    assert hierarchy.limit_file == "memory.max"


def test_a_cgroup_gets_the_limit_in_whole_pages_and_no_swap(tmp_path):
    hierarchy = cgroups.Hierarchy(2, tmp_path / "simrun")
    hierarchy.parent.mkdir()
    path = cgroups.create(hierarchy, "run.t.0", 1000)
    assert int((path / "memory.max").read_text()) == cgroups.PAGE
    path = cgroups.create(hierarchy, "run.t.1", 3 * cgroups.PAGE)
    assert int((path / "memory.max").read_text()) == 3 * cgroups.PAGE


def test_the_oom_kills_are_read_from_the_count_of_the_kernel(tmp_path):
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\n")
    assert cgroups.oom_kills(tmp_path) == 1
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert cgroups.oom_kills(v1) == 3
    assert cgroups.oom_kills(tmp_path / "gone") == 0


def test_the_v1_memory_controller_wins_on_a_hybrid_machine(tmp_path):
    mount = tmp_path / "sys/fs/cgroup/memory"
    own = mount / "process_api" / "abc"
    own.mkdir(parents=True)
    (own / "memory.stat").write_text("total_rss 0\n")
    proc = fake_proc(
        tmp_path,
        "4:memory:/process_api/abc\n0::/\n",
        f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
        f"36 31 0:33 / {tmp_path}/sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
    )
    assert cgroups.own_cgroup(proc) == (1, own)


def test_without_a_memory_controller_nothing_is_enforced(tmp_path):
    proc = fake_proc(tmp_path, "0::/\n", "22 1 0:21 / /proc rw - proc proc rw\n")
    assert cgroups.detect(proc) is None


def test_a_v2_cgroup_that_cannot_delegate_memory_enforces_nothing(tmp_path):
    proc, own = v2_machine(tmp_path)
    (own / "cgroup.subtree_control").unlink()
    (own / "cgroup.subtree_control").mkdir()  # the kernel refuses the write (processes in it)
    assert cgroups.detect(proc) is None
