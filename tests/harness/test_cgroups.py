"""The cgroup of a process, v2 (a pod) or v1 (this machine), read from procfs and sysfs.

The v2 cases read a tree laid out as a pod's (this machine has the v1 memory controller, so
a real v2 memory cgroup cannot be made here); the v1 and the real cases run on this machine.
"""

from __future__ import annotations

from pathlib import Path

from harness import cgroups


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _proc(tmp_path: Path, cgroup: str, mounts: list[str]) -> Path:
    proc = tmp_path / "proc"
    _write(proc, {"self/cgroup": cgroup, "self/mountinfo": "".join(m + "\n" for m in mounts)})
    return proc


def test_a_pods_cgroup_v2_gives_anon_limit_oom_kills_quota_and_throttling(tmp_path: Path) -> None:
    root = tmp_path / "sys fs"
    _write(
        root,
        {
            "memory.stat": "anon 104857600\nfile 7340032\nkernel 1000\n",
            "memory.max": "536870912\n",
            "memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n",
            "cpu.max": "150000 100000\n",
            "cpu.stat": "usage_usec 900\nthrottled_usec 1500000\n",
        },
    )
    mount = f"30 23 0:26 / {str(root).replace(' ', chr(92) + '040')} rw - cgroup2 cgroup2 rw"
    proc = _proc(tmp_path, "0::/\n", [mount])

    memory, cpu = cgroups.find("memory", proc), cgroups.find("cpu", proc)

    assert memory is not None and cpu is not None
    assert memory.version == 2 and memory.path == root
    assert memory.anon_bytes() == 104857600
    assert memory.limit_bytes() == 536870912
    assert memory.oom_kills() == 2
    assert cpu.quota_cores() == 2  # 1.5 cores round up
    assert cpu.throttled_seconds() == 1.5


def test_a_v2_limit_is_the_lowest_of_the_cgroup_and_its_parents(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    _write(
        root,
        {
            "memory.stat": "anon 1\n",
            "kubepods/memory.max": "max\n",
            "kubepods/pod/memory.max": "1073741824\n",
            "kubepods/pod/c1/memory.max": "max\n",
            "kubepods/pod/c1/memory.stat": "anon 5\n",
            "kubepods/pod/c1/cpu.max": "max 100000\n",
            "kubepods/pod/c1/cpu.stat": "usage_usec 1\n",
        },
    )
    proc = _proc(tmp_path, "0::/kubepods/pod/c1\n", [f"1 1 0:1 / {root} rw - cgroup2 none rw"])

    memory, cpu = cgroups.find("memory", proc), cgroups.find("cpu", proc)

    assert memory is not None and memory.path == root / "kubepods/pod/c1"
    assert memory.limit_bytes() == 1073741824
    assert cpu is not None and cpu.quota_cores() is None
    assert cpu.throttled_seconds() is None  # no throttled_usec: no quota ever applied


def test_the_v1_controllers_win_over_an_empty_v2_hierarchy(tmp_path: Path) -> None:
    sys_fs = tmp_path / "sys"
    _write(
        sys_fs,
        {
            "memory/a/b/memory.stat": (
                "rss 1\ntotal_rss 209715200\nhierarchical_memory_limit 268435456\n"
            ),
            "memory/a/b/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
            "cpu,cpuacct/a/b/cpu.cfs_quota_us": "200000\n",
            "cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/a/b/cpu.stat": "nr_periods 5\nnr_throttled 1\nthrottled_time 2000000000\n",
            "unified/cgroup.procs": "",
        },
    )
    proc = _proc(
        tmp_path,
        "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/a/b\n0::/\n",
        [
            f"35 31 0:32 / {sys_fs}/memory rw - cgroup cgroup rw,memory",
            f"32 31 0:29 / {sys_fs}/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
            f"41 31 0:38 / {sys_fs}/unified rw - cgroup2 cgroup2 rw",
        ],
    )

    memory, cpu = cgroups.find("memory", proc), cgroups.find("cpu", proc)

    assert memory is not None and memory.version == 1
    assert memory.anon_bytes() == 209715200
    assert memory.limit_bytes() == 268435456
    assert memory.oom_kills() == 3
    assert cpu is not None and cpu.quota_cores() == 2
    assert cpu.throttled_seconds() == 2.0


def test_a_v1_limit_of_the_page_counter_maximum_is_no_limit(tmp_path: Path) -> None:
    _write(
        tmp_path / "m",
        {"memory.stat": "total_rss 1\nhierarchical_memory_limit 9223372036854771712\n"},
    )
    group = cgroups.Cgroup(tmp_path / "m", 1, tmp_path / "m")

    assert group.limit_bytes() is None


def test_no_cgroup_filesystem_means_no_cgroup(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/\n", ["22 1 0:21 / /proc rw - proc proc rw"])

    assert cgroups.find("memory", proc) is None
    assert cgroups.find("cpu", tmp_path / "nowhere") is None


def test_this_process_has_a_readable_memory_cgroup_if_any() -> None:
    memory = cgroups.find("memory")

    if memory is not None:
        assert memory.anon_bytes() is not None and memory.anon_bytes() > 0  # type: ignore[operator]
        assert memory.oom_kills() is not None
