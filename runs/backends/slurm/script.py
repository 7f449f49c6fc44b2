"""The batch script and the ``sbatch`` arguments of a job: pure functions of a node.

A job runs one attempt of one DAG node (an array runs extra workers, one element each). Its
``SIMRUN_*`` variables are written into the script, and ``--export=NONE`` keeps the service's
own environment (its database URL, its secret key) out of the job. The script sends its output
to ``logs/<node>-<attempt>.log`` in the task's folder, the attempt counting Slurm's requeues
(``SLURM_RESTART_COUNT``); Slurm's own words (a kill for memory, a time limit) go to
``logs/slurm-<job>.out``, opened in append mode so a requeue keeps the first run's.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from runs.backends.slurm.state import NodeSpec

COMMENT_PREFIX = "simrun"
PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Placement:
    """Where a site wants the jobs: empty fields leave Slurm's defaults."""

    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = ""
    extra: tuple[str, ...] = ()


def comment(node: str, attempt: int, first: int | None = None) -> str:
    """The job's comment: the node and the attempt (an array: its group and first worker)."""
    if first is None:
        return f"{COMMENT_PREFIX} node={node} attempt={attempt}"
    return f"{COMMENT_PREFIX} array={node} first={first} attempt={attempt}"


def parse_comment(text: str) -> dict[str, str]:
    """The fields of a comment of ``comment``; empty for another job's."""
    words = text.split()
    if not words or words[0] != COMMENT_PREFIX:
        return {}
    return dict(w.split("=", 1) for w in words[1:] if "=" in w)


def extra_node(task: str, worker: int) -> str:
    """The DAG node of extra worker ``worker`` (``<task>-w<worker>``), as Argo names it."""
    return f"{task}-extra({worker - 1}:{worker})"


def memory_mb(gb: float) -> int:
    """GiB as Slurm's whole MiB, rounded up."""
    return math.ceil(gb * 1024 - 1e-9)


def batch_script(
    spec: NodeSpec,
    *,
    attempt: int,
    memory_gb: float,
    logs: Path,
    bin_dir: Path,
    grace_s: float,
    first: int | None = None,
) -> str:
    """The script of a job of ``spec``; ``first`` makes it an array's (worker first + index)."""
    env = {
        **spec.env,
        "SIMRUN_MEMORY_LIMIT_GB": f"{memory_gb:g}",
        "SIMRUN_MEMORY_SOURCE": "cgroup",
        "SIMRUN_GRACE_S": f"{grace_s:g}",
    }
    lines = [
        "#!/bin/bash",
        f"# simrun: {spec.name} attempt {attempt}",
        f"export PATH={shlex.quote(f'{bin_dir}:{PATH}')}",
        "export LANG=C.UTF-8 PYTHONUNBUFFERED=1",
        *(f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())),
        f"export SIMRUN_ATTEMPT=$(( {attempt} + ${{SLURM_RESTART_COUNT:-0}} ))",
        'export SIMRUN_NODE="${SLURMD_NODENAME:-$(hostname -s)}"',
    ]
    if first is None:
        lines.append(f"node={shlex.quote(spec.name)}")
    else:
        lines += [
            f"n=$(( {first} + ${{SLURM_ARRAY_TASK_ID:-0}} ))",
            f'export SIMRUN_WORKER="{spec.task}-w$n"',
            f'node="{spec.task}-extra($(( n - 1 )):$n)"',
        ]
    lines += [
        f'exec >>{shlex.quote(str(logs))}/"$node-$SIMRUN_ATTEMPT.log" 2>&1',
        # A new folder of its own (mktemp: mode 0700, never one that exists): another
        # cluster's job on a shared host may hold the same id, another user a planted name.
        'scratch=$(mktemp -d "${TMPDIR:-/tmp}/simrun-$SLURM_JOB_ID-$SIMRUN_ATTEMPT.XXXXXXXX")'
        ' && cd "$scratch" || exit 75',
        "trap 'cd / && rm -rf \"$scratch\"' EXIT",
        'export SIMRUN_SCRATCH="$scratch" HOME="$scratch" TMPDIR="$scratch"',
        'echo "[simrun] $node attempt $SIMRUN_ATTEMPT: job $SLURM_JOB_ID on $SIMRUN_NODE"',
    ]
    if spec.kind == "command":
        lines.append('mkdir -p "$SIMRUN_OUT" inputs || exit 75')
        lines += [
            f'cp -RP "$SIMRUN_STORE"/{shlex.quote(source)} inputs/{shlex.quote(port)} || exit 75'
            for source, port in spec.stage
        ]
    lines += [
        shlex.join(spec.argv),
        "status=$?",
        'echo "[simrun] exit $status"',
        "exit $status",
        "",
    ]
    return "\n".join(lines)


def sbatch_argv(
    spec: NodeSpec,
    *,
    workflow: str,
    attempt: int,
    memory_gb: float,
    logs: Path,
    where: Placement,
    array: tuple[int, int] | None = None,
) -> list[str]:
    """``sbatch`` for a job of ``spec``; ``array`` (first worker, count) submits an array."""
    first = None if array is None else array[0]
    out = "slurm-%A_%a.out" if array else "slurm-%j.out"
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={workflow}",
        f"--comment={comment(spec.array or spec.name, attempt, first)}",
        "--export=NONE",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.cores}",
        f"--mem={memory_mb(memory_gb)}M",
        "--open-mode=append",
        f"--output={logs / out}",
        "--chdir=/",
    ]
    if array is not None:
        argv.append(f"--array=0-{array[1] - 1}")
    for flag, value in (
        ("--partition", where.partition),
        ("--account", where.account),
        ("--qos", where.qos),
        ("--time", spec.time_limit or where.time_limit),
    ):
        if value:
            argv.append(f"{flag}={value}")
    return [*argv, *where.extra]


def chunks(first: int, count: int, max_array: int) -> list[tuple[int, int]]:
    """(first worker, count) of each array of ``count`` workers from ``first``: an array's
    indices start at 0 and stay under ``MaxArraySize``."""
    size = max(1, max_array - 1)
    return [
        (start, min(size, first + count - start)) for start in range(first, first + count, size)
    ]
