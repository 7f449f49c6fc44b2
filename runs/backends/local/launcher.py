"""The launcher of one process of the local backend: starts it detached and records its end.

The step of the backend writes ``<node>-<attempt>.launch`` (what to run, its environment, its
cgroups) in the task's ``logs/`` folder (the service's own, ``harness.untrusted.service_dir``)
and starts ``python launcher.py LAUNCH_FD LOGS_FD`` in a session of its own with its
output into ``<node>-<attempt>.log``: the launch file and the folder are inherited descriptors,
so no command line in ``ps`` names a run, and every file the launcher writes there is made
relative to the folder's descriptor, never through a link a task planted. The launcher
prepares what the process needs (the venv of the run, its inputs, staged as the task user),
starts it in a session and process group of its own (and in its memory and pids cgroups, as
its task user), writes ``<node>-<attempt>.pid`` naming it, waits for its end and writes
``<node>-<attempt>.exit`` (exit code, signal, kills of the out of memory killer, times,
whether simrun stopped it), then removes the pid file and wakes the step. The launcher is the
subreaper of the process's tree and reaps each orphan as it exits: a SIGTERM from the backend
goes to every descendant, and whatever the process leaves running (a ``setsid`` child too) is
killed at its end, with or without cgroups. So no process of the service owns a run: any
process reads the state from these files, and a run survives a restart of the service.

It runs as a script, not as a module of ``runs``, so that it starts in milliseconds without
the service's packages: its siblings ``cgroups``, ``env``, ``shm`` and ``budget`` are imported
from its directory, and it uses nothing else of the service (only the harness's stdlib modules).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

from harness import untrusted
from harness.cgroups import Cgroup
from harness.errors import EXIT_STORAGE, EXIT_TERMINATED, STORAGE_ERRNOS
from harness.memory import PeakSource, process_tree_anon
from harness.report import LIVE_SAMPLES, LiveMemory, WorkerReport, command_live_name

STARTING_EXIT = 4
"""The exit code recorded when the process could not be prepared or started."""
PR_SET_CHILD_SUBREAPER = 36
"""prctl: orphaned descendants of the launcher become its children, not init's."""
REAP_ROUNDS = 50
"""The rounds of killing what is left of a process tree before the launcher gives up."""
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sh14x"
"""``struct ifreq`` with its flags: the name of an interface and its flags."""


SERVICE_FILE_CAP = 1 << 20
"""The most the launcher reads of its launch file."""
LIVE_SAMPLE_S = 0.25
"""Seconds between two samples of a plain command's memory."""
LIVE_WRITE_S = 1.0
"""Seconds between two writes of its live file (as the harness's heartbeat)."""


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically in a folder of the service's own (temp file + rename, no link
    followed)."""
    with untrusted.directory(path.parent) as folder:
        untrusted.write_atomic_at(folder, path.name, json.dumps(data))


def read_json(path: Path) -> Any:
    """The JSON of a file, None when it is missing or not (yet) complete."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def process_start(pid: int) -> int | None:
    """When a process started, in clock ticks since boot (field 22 of its stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def process_cmdline(pid: int) -> list[str] | None:
    """The command line of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1]


def same_process(pid: int, start: int | None, cmdline: list[str] | None) -> bool:
    """Whether ``pid`` is still the process recorded: the same start time and command line."""
    return start is not None and process_start(pid) == start and process_cmdline(pid) == cmdline


def notify(address: str, sock: socket.socket | None = None) -> None:
    """Wake the step of the backend (a datagram to its socket, from ``sock`` if given);
    nothing when none listens, nor when its queue is full (never a wait: it polls anyway)."""
    with contextlib.ExitStack() as made, contextlib.suppress(OSError):
        if sock is None:
            sock = made.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
        sock.sendto(b"1", socket.MSG_DONTWAIT, address)


def isolate_network() -> None:
    """Move the launcher, and so all it starts from now on (the sources' build, the staging,
    the task), into a network namespace of its own with only a loopback of its own: no port,
    address or abstract socket of the machine's is theirs to take or reach
    (``SIMRUN_TASK_NETWORK=loopback``, docs/team.md)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(
            error,
            f"its network could not be isolated ({os.strerror(error)}); "
            "SIMRUN_TASK_NETWORK=host gives tasks the machine's network (docs/team.md)",
        )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(IFREQ, b"lo", 0)
        flags = struct.unpack(IFREQ, fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def last_line(logs_fd: int, name: str, size: int = 4096) -> str:
    """The last line of a log that is not empty (as a pod's termination message on error)."""
    try:
        with untrusted.open_regular(logs_fd, name) as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
            lines = handle.read(size).decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip()[:300] for line in reversed(lines) if line.strip()), "")


def _exit_code(returncode: int) -> tuple[int, int | None]:
    """The exit code as a shell reports it (128 + signal) and the signal that ended it."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def _docker(*args: str) -> str:
    """The output of a docker command; empty when it fails."""
    try:
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _prepare(launch: dict[str, Any], stopped: Callable[[], bool]) -> IO[str] | None:
    """Install the packages of the run's environment (once for every run naming them),
    then isolate the network (``isolate_network``), create the venv of the run and the
    scratch directory, hand both to the task user, and stage the inputs of a command into the
    scratch as that user. The lock that keeps the
    packages' venv while the process runs, if it has one."""
    import env as local_env  # the sibling module, see the docstring of this module

    venv = launch.get("venv")
    user = launch.get("user")
    held = None
    if packages := launch.get("packages"):
        install = local_env.Install(
            store=Path(packages["store"]),
            packages=tuple(packages["packages"]),
            timeout_s=packages["timeout_s"],
            uid=user["uid"] if user else None,
            gid=user["gid"] if user else None,
            kept=packages["kept"],
            cache_gb=packages["cache_gb"],
            pip_env=packages["pip_env"],
        )
        _, held = local_env.ensure_packages(install, stopped)
        end_tree()  # what the packages' build code left running does not outlive their install
    try:
        if user and launch.get("network") == "loopback":
            isolate_network()  # the packages came from their index: nothing after needs it
        if venv:
            venv_dir = Path(venv["dir"])
            sources_builder = None
            if user:  # the sources' build code runs as the task user
                env = local_env.build_env(venv_dir)
                sources_builder = local_env.Builder(env=env, uid=user["uid"], gid=user["gid"])
            base = Path(venv["base"]) if venv.get("base") else None
            snapshots = [Path(s) for s in venv["snapshots"]]
            local_env.ensure(venv_dir, snapshots, user=sources_builder, base=base)
        scratch = Path(launch["cwd"])
        scratch.mkdir(parents=True, exist_ok=True)
        # A container runs as the service's docker client, but stages and works as the task
        # user.
        owner = user or launch.get("stage_user")
        if owner:
            _hand_over(scratch, owner)
        if user and venv:
            _hand_over(Path(venv["dir"]), user)
        if launch.get("stage"):
            pairs = [(str(a), str(b)) for a, b in launch["stage"]]
            _stage(pairs, Path(launch["store"]), scratch, owner)
    except BaseException:
        if held is not None:
            held.close()
        raise
    return held


def _hand_over(directory: Path, user: dict[str, Any]) -> None:
    """Give a directory of the service's (the scratch, the venv) to the task user alone,
    through its descriptor (it is never a link)."""
    with untrusted.directory(directory.parent, [directory.name]) as fd:
        os.fchown(fd, user["uid"], user["gid"])
        os.fchmod(fd, 0o700)


def _become(user: dict[str, Any]) -> None:
    """Drop to the task user for good (in a child of the launcher)."""
    os.setgroups([])
    os.setgid(user["gid"])
    os.setuid(user["uid"])
    os.umask(user["umask"])


def _stage(
    pairs: list[tuple[str, str]], store: Path, scratch: Path, user: dict[str, Any] | None
) -> None:
    """Copy the inputs into the scratch as the task user (a child that dropped to it), so
    only what that user could read is copied; its error, if any, is raised here."""
    from harness.sources import stage

    if not user:
        stage(pairs, store, scratch)
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, measured by the tests that stage as a user
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.close(read)
            _become(user)
            stage(pairs, store, scratch)
        except BaseException as error:  # noqa: BLE001 - told to the launcher, then exit
            number = getattr(error, "errno", None) or 0
            os.write(write, f"{number} {error}".encode(errors="replace")[:2000])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read(4096).decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        # The child's errno comes first, so a failing disk is a storage error here too.
        number, _, message = said.partition(" ")
        why = message or os.waitstatus_to_exitcode(status)
        raise OSError(int(number) if number.isdigit() else 0, f"staging its inputs failed: {why}")


def _enter(launch: dict[str, Any]) -> None:
    """In the child before its exec: join its cgroup (as root), get a ``/dev/shm`` of its own
    and its limit of a file's size, then become its task user."""
    if launch.get("cgroup"):
        import cgroups  # the sibling module, see the docstring of this module

        cgroups.join(Path(launch["cgroup"]))
    if launch.get("pids_cgroup"):
        import cgroups

        cgroups.join(Path(launch["pids_cgroup"]))
    if shm := launch.get("shm"):
        import shm as local_shm  # the sibling module, see the docstring of this module

        try:
            local_shm.own_shm(shm["bytes"], shm["inodes"])
        except OSError as error:
            print(f"simrun: /dev/shm is the machine's, not the task's own: {error}", flush=True)
    if budget := launch.get("budget"):
        import budget as local_budget  # the sibling module, see the docstring of this module

        local_budget.Budget.from_json(budget).limit_file_size()
    if user := launch.get("user"):
        if not launch.get("pids_cgroup") and launch.get("pids_max"):
            # No pids controller: the limit of the task user's processes, all of its tasks'.
            limit = int(launch["pids_max"])
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        _become(user)


def _start(launch: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the process in a session of its own (its cgroup, its user) with the launcher's
    output (the pipe of its capped log)."""
    import budget as local_budget  # noqa: F401 - imported before the fork, for ``_enter``
    import shm as local_shm  # noqa: F401

    return subprocess.Popen(
        launch["argv"],
        cwd=launch["cwd"],
        env=launch["env"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        # Safe: the only other thread then is the log's pump, which takes no lock (os calls).
        preexec_fn=functools.partial(_enter, launch),
    )


def descendants(root: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process below ``root`` in the process tree (children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_tree(signum: int) -> None:
    """Signal every descendant of the launcher, wherever its session or group."""
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def end_tree() -> None:
    """Kill every descendant left (a ``setsid``/``nohup`` child too) and reap them: the
    launcher is their subreaper, so none escapes to init."""
    for _ in range(REAP_ROUNDS):
        left = descendants(os.getpid())
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.01)


def become_subreaper() -> None:
    """Make the orphans of the process tree children of the launcher (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def wait_reaping(pid: int) -> int:
    """Wait for the process ``pid`` (its status as ``Popen.returncode``), reaping every other
    child as it exits meanwhile: the orphans of its tree, whose subreaper the launcher is."""
    while True:
        try:
            found, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return -signal.SIGKILL.value  # reaped elsewhere: cannot happen in the launcher
        if found == pid:
            return os.waitstatus_to_exitcode(status)


def _unstarted_exit(error: BaseException, stopped: bool) -> int:
    """The exit code of a process that could not be started: 143 stopped on SIGTERM, 75 when
    a disk failed under its staging or scratch (the store's fault, retried, as the harness
    exits), else 4."""
    if stopped:
        return EXIT_TERMINATED
    if getattr(error, "errno", None) in STORAGE_ERRNOS:
        return EXIT_STORAGE
    return STARTING_EXIT


def _capture(launch: dict[str, Any]) -> Any:
    """Send what the launcher and its process print (stdout and stderr, the venv's build too)
    through a pipe into the log, capped (``logcap``); the pump, to stop at the end."""
    from harness import logcap

    read, write = os.pipe()
    pump = logcap.LogPump(read, sys.stdout.fileno(), int(launch["log_bytes"]))
    log = os.dup(sys.stdout.fileno())
    os.set_inheritable(log, False)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    pump.start()

    dropped: list[int] = []

    def stop() -> int:
        """Point stdout and stderr at the log again and drain the pipe (once); the bytes the
        log dropped."""
        if not dropped:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            dropped.append(int(pump.stop()))
        return dropped[0]

    return stop


def _watch(launch: dict[str, Any]) -> Any:
    """The watch of the task's budget of files (``local_budget``), None without a budget."""
    if not launch.get("budget"):
        return None
    import budget as local_budget  # the sibling module, see the docstring of this module

    budget = local_budget.Budget.from_json(launch["budget"])
    store, task = Path(launch["store"]), tuple(untrusted.parts_of(launch["task"]))
    scratch = Path(launch["cwd"])
    user = launch.get("user_budget")
    ledger = local_budget.Ledger.from_json(user) if user else None

    def count() -> str | None:
        usage = local_budget.measure(budget, store, task, scratch)
        over: str | None = local_budget.exceeded(budget, usage)
        if over is None and ledger is not None:
            over = ledger.over(usage)
        return over

    return local_budget.Watch(
        budget,
        count=count,
        kill=lambda: signal_tree(signal.SIGKILL),
        done=ledger.leave if ledger is not None else None,
    )


def _over_budget(launch: dict[str, Any], result: dict[str, Any], over: str) -> None:
    """Fail an attempt over its budget of files, naming it, and remove what it wrote."""
    import budget as local_budget  # the sibling module, see the docstring of this module

    local_budget.remove_written(Path(launch["store"]), tuple(untrusted.parts_of(launch["task"])))
    result["over_budget"] = over
    result["message"] = f"{over}; what it wrote was removed"


def run(launch_fd: int, logs_fd: int) -> int:
    """Run the process of a launch file to its end and record it beside it, in the folder of
    ``logs_fd``; returns its exit code."""
    with os.fdopen(launch_fd, "rb") as handle:
        launch = json.loads(handle.read(SERVICE_FILE_CAP))
    stop_capture = _capture(launch) if launch.get("log_bytes") else None
    try:
        return _run(launch, logs_fd, stop_capture)
    finally:
        if stop_capture is not None:
            stop_capture()


def _run(launch: dict[str, Any], logs_fd: int, stop_capture: Any) -> int:
    stem = launch["name"]
    pid_name, exit_name, log_name = f"{stem}.pid", f"{stem}.exit", f"{stem}.log"

    def record(name: str, data: Any) -> None:
        untrusted.write_atomic_at(logs_fd, name, json.dumps(data))

    started = time.time()
    result: dict[str, Any] = {
        "started": started,
        "signal": None,
        "oom_kills": 0,
        "message": "",
        "stopped_by_simrun": False,
    }

    stopping = False

    def stop(signum: int, frame: object) -> None:
        # Only the backend signals the launcher (a cancel or a stop): the whole tree of the
        # process gets the SIGTERM, wherever its session; one not started yet never starts.
        nonlocal stopping
        stopping = True
        result["stopped_by_simrun"] = True
        signal_tree(signal.SIGTERM)

    become_subreaper()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    me = os.getpid()
    names = {
        "launcher": me,
        "launcher_start": process_start(me),
        "launcher_cmdline": process_cmdline(me),
        "container": launch.get("container"),
    }
    record(pid_name, names)
    # Made before any isolation: an abstract address is looked up in its socket's namespace.
    waker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    held = None
    try:
        held = _prepare(launch, lambda: stopping)
        if stopping:
            raise InterruptedError("stopped on SIGTERM before it started")
        child = _start(launch)
    except Exception as error:  # noqa: BLE001 - any failure to start is the process's end
        print(f"simrun: the process could not be started: {error}", flush=True)
        stopped = stopping or isinstance(error, InterruptedError)
        result.update(
            exit_code=_unstarted_exit(error, stopped),
            signal=signal.SIGTERM.value if stopped else None,
            message="" if stopped else f"could not be started: {error}",
        )
    else:
        pid = child.pid
        names.update(
            pid=pid, start=process_start(pid), cmdline=process_cmdline(pid), started=time.time()
        )
        record(pid_name, names)
        if launch.get("notify"):  # it runs from now on: the step tells the service at once
            notify(launch["notify"], waker)
        if stopping:  # a SIGTERM came while it started, before the backend could know it
            os.killpg(pid, signal.SIGTERM)
        sampler = None
        if launch.get("live"):
            sampler = LiveSampler(logs_fd, command_live_name(stem), pid, launch.get("cgroup"))
            sampler.start()
        watch = _watch(launch)
        if watch is not None:
            watch.start()
        child.returncode = wait_reaping(pid)
        if sampler is not None:
            sampler.stop()
        over = watch.stop() if watch is not None else None
        result["exit_code"], result["signal"] = _exit_code(child.returncode)
        if result["signal"] == signal.SIGXFSZ and watch is not None:
            over = over or watch.budget.too_large_a_file()
        if launch.get("report"):
            _report(launch, result)
        _clean_up(launch, child.pid, result)
        if over is not None:
            _over_budget(launch, result, over)
        if stop_capture is not None:
            result["log_dropped"] = stop_capture()
        if result["exit_code"] != 0:
            result["last_line"] = last_line(logs_fd, log_name)
    if held is not None:
        held.close()  # the packages' venv is no longer in use by this process
    result["ended"] = time.time()
    record(exit_name, result)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pid_name, dir_fd=logs_fd)
    if launch.get("notify"):
        notify(launch["notify"], waker)
    waker.close()
    return int(result["exit_code"])


class LiveSampler:
    """The live memory of a plain command, which has no harness to write it: a thread that
    samples its cgroup's anonymous memory and tmpfs pages (its ``/dev/shm``, which its peak
    counts too; else its process tree's anonymous memory) and rewrites
    ``LiveMemory`` in the service's ``logs/`` folder (by descriptor, never through a link)
    every ``LIVE_WRITE_S``, as the harness's heartbeat does for its workers."""

    def __init__(self, logs_fd: int, name: str, pid: int, cgroup: str | None) -> None:
        self.logs_fd, self.name, self.pid = logs_fd, name, pid
        self.cgroup = None
        if cgroup:
            path = Path(cgroup)
            version: Literal[1, 2] = 1 if (path / "memory.max_usage_in_bytes").exists() else 2
            self.cgroup = Cgroup(path, version, path.parent)
        self.samples: deque[tuple[float, int]] = deque(maxlen=LIVE_SAMPLES)
        self.window: int | None = None
        self.peak: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simrun-live", daemon=True)

    def sample(self) -> None:
        cgroup = self.cgroup
        value = cgroup.held_bytes() if cgroup is not None else process_tree_anon(self.pid)
        if value is None:
            return
        self.window = value if self.window is None else max(self.window, value)
        self.peak = value if self.peak is None else max(self.peak, value)

    def write(self) -> None:
        now = round(time.time(), 3)
        if self.window is not None:
            self.samples.append((now, self.window))
            self.window = None
        live = LiveMemory(samples=list(self.samples), peak_bytes=self.peak, updated=now)
        with contextlib.suppress(OSError):  # a full disk: the next write tries again
            untrusted.write_atomic_at(self.logs_fd, self.name, live.to_json())

    def _run(self) -> None:
        next_write = time.monotonic()
        while True:
            self.sample()
            if time.monotonic() >= next_write:
                self.write()
                next_write = time.monotonic() + LIVE_WRITE_S
            if self._done.wait(LIVE_SAMPLE_S):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread and write the file once more, its last samples in."""
        self._done.set()
        self._thread.join()
        self.write()


def command_peak(cgroup: Path | None) -> tuple[int | None, PeakSource]:
    """The peak of a plain command that ended: its cgroup's high-water mark less the page
    cache left at its end, else the largest resident memory of one of its processes."""
    if cgroup is not None:
        version: Literal[1, 2] = 1 if (cgroup / "memory.max_usage_in_bytes").exists() else 2
        found = Cgroup(cgroup, version, cgroup.parent)
        mark = found.high_water_bytes()
        if mark is not None:
            cache = found.page_cache_bytes() or 0
            return max(0, mark - cache), "cgroup-v1-max-usage" if version == 1 else "cgroup-v2-peak"
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (kib * 1024 if kib else None), "rusage-maxrss"


def _report(launch: dict[str, Any], result: dict[str, Any]) -> None:
    """Write the report a plain command cannot write itself, so the planner learns its peak,
    not only its kills; a report already there (the command wrote one) is kept."""
    parts = untrusted.parts_of(launch["report"])  # below the store: runs/R/tasks/T/workers/W
    try:
        task = untrusted.open_dir(Path(launch["store"]), parts[:-2])
    except OSError:
        return  # the task's folder is gone or was replaced by a link: nothing is written
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(parts[-2], 0o770, dir_fd=task)
        with untrusted.directory(task, parts[-2:-1]) as workers:
            _write_report(launch, result, workers, parts[-1])
    except OSError:
        return  # a link or a file as workers/: the report is left out, never written through
    finally:
        os.close(task)


def _write_report(launch: dict[str, Any], result: dict[str, Any], workers: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=workers, follow_symlinks=False)
        return  # the command wrote one
    cgroup = Path(launch["cgroup"]) if launch.get("cgroup") else None
    peak, source = command_peak(cgroup)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    memory = int(launch["memory_gb"] * 2**30)
    report = WorkerReport(
        worker=name.removesuffix(".json").rsplit("-", 1)[0],
        node=socket.gethostname(),
        processes=1,
        seconds=time.time() - result["started"],
        peak_memory_bytes=peak,
        memory_limit_bytes=memory,
        per_worker_gb=launch["memory_gb"],
        failed=result["exit_code"] != 0 and result["signal"] is None,
        completed=result["exit_code"] == 0 and result["signal"] is None,
        started=result["started"],
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_source=source,
    )
    untrusted.write_atomic_at(workers, name, report.to_json(), mode=0o660)


def _clean_up(launch: dict[str, Any], pid: int, result: dict[str, Any]) -> None:
    """Kill what the process left (its group and every descendant), read the OOM evidence,
    remove the cgroup."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    end_tree()
    scratch = Path(launch["cwd"])  # the scratch goes with the process, however deep
    untrusted.remove_tree(scratch.parent, [scratch.name])
    if launch.get("cgroup"):
        import cgroups  # the sibling module, see the docstring of this module

        path = Path(launch["cgroup"])
        result["oom_kills"] = cgroups.oom_kills(path)
        cgroups.remove(path)
    if launch.get("pids_cgroup"):
        import cgroups

        cgroups.remove(Path(launch["pids_cgroup"]))
    if launch.get("container"):
        if _docker("inspect", "--format", "{{.State.OOMKilled}}", launch["container"]) == "true":
            result["oom_kills"] = 1
        _docker("rm", "--force", launch["container"])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not all(a.isdigit() for a in args):
        print("usage: launcher.py LAUNCH_FD LOGS_FD", file=sys.stderr)
        return 2
    return run(int(args[0]), int(args[1]))


if __name__ == "__main__":
    raise SystemExit(main())
