"""A build of an environment's packages runs its user's code behind the wall a task has
(runs/backends/local/wall.py): a build backend (in its own tree, no index needed) that
allocates past the build's memory, listens on a port, reaches for the web's port and leaves
files in the machine's shared folders is stopped, and leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from runs.backends.local import builds, egress, wall
from runs.backends.local import env as local_env
from tests.backends.packages import pip_index, write_sdist

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="task users and cgroups need root")

UID = 330000 + 7
SHARED = ("/dev/shm", "/tmp", "/var/tmp", "/run/lock")

HOG = """import os, socket, time
from pathlib import Path

SEEN, MARK, PORT, LISTEN, HOG_BYTES = {seen!r}, {mark!r}, {port!r}, {listen!r}, {hog!r}
SHARED = {shared!r}


def get_requires_for_build_wheel(config_settings=None):
    return []


def _daemon():
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    seen = Path(SEEN)
    server = socket.socket()
    try:
        server.bind(("127.0.0.1", LISTEN))
        server.listen(8)
    except OSError:
        pass
    for folder in SHARED:
        try:
            Path(folder, MARK).write_text("left behind")
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
        said = "reached"
    except OSError as error:
        said = "refused: " + str(error)
    (seen / "daemon.pid.tmp").write_text(str(os.getpid()))
    os.rename(seen / "daemon.pid.tmp", seen / "daemon.pid")
    (seen / "net.tmp").write_text(said)
    os.rename(seen / "net.tmp", seen / "net")
    time.sleep(600)
    os._exit(0)


def build_wheel(directory, config_settings=None, metadata_directory=None):
    first = os.fork()
    if first == 0:
        _daemon()
    os.waitpid(first, 0)
    deadline = time.monotonic() + 60
    while not Path(SEEN, "net").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    hog = b"x" * HOG_BYTES  # every page written: resident
    Path(SEEN, "allocated").write_text(str(len(hog)))
    raise SystemExit("built nothing")
"""
"""A build backend that daemonises (double fork, ``setsid``), listens on ``LISTEN``, tries
``PORT``, leaves files in the shared folders, then allocates ``HOG_BYTES``."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_build_that_allocates_listens_and_daemonises_is_stopped_and_leaves_nothing(
    team_folder, monkeypatch
) -> None:
    seen = team_folder / "store" / "seen"
    seen.mkdir(parents=True)
    seen.chmod(0o777)
    index = pip_index(team_folder / "index", monkeypatch)
    mark, listen = f"simrun-wall-{uuid.uuid4().hex}", free_port()
    with socket.socket() as web:
        web.bind(("127.0.0.1", 0))
        web.listen(8)
        web.setblocking(False)
        backend = HOG.format(
            seen=str(seen),
            mark=mark,
            port=web.getsockname()[1],
            listen=listen,
            hog=1 << 30,
            shared=SHARED,
        )
        write_sdist(index, "hogbuild", seen / "builds", backend=backend)
        install = local_env.Install(
            store=team_folder / "store",
            packages=("hogbuild",),
            timeout_s=120,
            uid=UID,
            gid=UID,
            pip_env=local_env.pip_env(),
            memory_bytes=256 << 20,
        )

        with pytest.raises(local_env.PackagesError) as error:
            local_env.ensure_packages(install)

        # Stopped at its memory, saying so.
        assert "was killed for memory" in str(error.value), str(error.value)
        assert "SIMRUN_BUILD_MEMORY_GB" in str(error.value)
        assert not (seen / "allocated").exists()
        # Nothing of it outlives the build.
        assert gone(int((seen / "daemon.pid").read_text()))
        # Its loopback was its own: the web's port was not reached, its port is not the
        # machine's.
        assert (seen / "net").read_text().startswith("refused")
        with pytest.raises(BlockingIOError):
            web.accept()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", listen)):
        pass
    for folder in SHARED:
        assert not Path(folder, mark).exists(), folder


def walled(argv: list[str], folder: Path, timeout_s: float) -> wall.Spec:
    """What the wall runs as the service's user here (as root: its namespaces, no task user),
    ``folder`` visible."""
    limits = wall.Limits(memory_bytes=256 << 20, pids_max=64, timeout_s=timeout_s)
    return wall.Spec(argv, {"PATH": "/usr/bin:/bin"}, str(folder), None, limits, [str(folder)])


def test_the_wall_stops_its_process_at_its_time_with_what_it_started_in_another_session(
    tmp_path,
) -> None:
    pid_file = tmp_path / "escaped.pid"
    inner = f"echo \\$\\$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 300"
    script = f'setsid sh -c "{inner}" & until [ -e {pid_file} ]; do sleep 0.05; done; sleep 300'

    ended = wall.run(walled(["sh", "-c", script], tmp_path, timeout_s=3))

    assert (ended.returncode, ended.stopped) == (None, wall.STOPPED_TIMEOUT)
    assert gone(int(pid_file.read_text()))


def test_a_process_the_wall_cannot_start_says_why(tmp_path) -> None:
    ended = wall.run(walled([str(tmp_path / "missing")], tmp_path, timeout_s=30))

    assert ended.returncode is None
    assert ended.stopped.startswith("could not be started") and "missing" in ended.stopped


REACH = """import os, socket, sys, urllib.request
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    print("direct reached")
except OSError:
    print("direct refused")
proxy = os.environ["HTTPS_PROXY"].removeprefix("http://").split(":")
for host in sys.argv[2:]:
    with socket.create_connection((proxy[0], int(proxy[1])), timeout=30) as sock:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\\r\\n\\r\\n".encode())
        print("connect", host, sock.recv(100).split(b"\\r\\n")[0].decode())
    try:
        urllib.request.urlopen(f"http://{host}:{port}/", timeout=30)
        print("get", host, "reached")
    except OSError as error:
        print("get", host, getattr(error, "code", error))
"""
"""A build's code trying the web's port directly, then through its proxy to each address."""


def machine_addresses() -> list[str]:
    """Addresses of this machine: loopback, and those of its interfaces a route uses."""
    found = {"127.0.0.1", "localhost"}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
        probe.connect(("192.0.2.1", 9))  # no packet is sent: the route's source address
        found.add(probe.getsockname()[0])
    return sorted(found)


def test_a_build_whose_index_is_on_the_network_reaches_no_port_of_this_machine(tmp_path) -> None:
    """Its proxy (``egress``) dials other machines only: the web's port, on loopback or on an
    address of the machine's interfaces, is refused before any connection is made."""
    with socket.socket() as web:
        web.bind(("0.0.0.0", 0))
        web.listen(8)
        web.setblocking(False)
        port = web.getsockname()[1]
        limits = wall.Limits(256 << 20, 64, timeout_s=120, network="proxy")
        argv = [sys.executable, "-c", REACH, str(port), *machine_addresses()]
        env, folder = {"PATH": "/usr/bin:/bin"}, str(tmp_path)
        spec = wall.Spec(argv, env, folder, None, limits, [folder])
        with tempfile.TemporaryFile() as out:
            ended = wall.run(spec, stdout=out, stderr=subprocess.STDOUT)
            out.seek(0)
            said = out.read().decode()

        assert ended.returncode == 0, said
        assert "direct refused" in said
        for host in machine_addresses():
            assert f"connect {host} HTTP/1.1 403 Forbidden" in said, said
            assert f"get {host} 403" in said, said
        with pytest.raises(BlockingIOError):
            web.accept()  # not even a connection was made


def test_the_build_proxy_relays_https_and_http_to_another_machine(monkeypatch) -> None:
    """What the proxy does for an index elsewhere, with this machine's loopback standing in
    for another machine (``is_local`` told otherwise)."""
    monkeypatch.setattr(egress, "is_local", lambda address: False)
    with socket.socket() as index:
        index.bind(("127.0.0.1", 0))
        index.listen(8)
        port = index.getsockname()[1]
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        threading.Thread(target=egress.serve_dialer, args=(theirs,), daemon=True).start()
        proxy = egress.Proxy(mine, bind=lambda: None)
        proxy.start()
        where = proxy.url.removeprefix("http://").split(":")
        with socket.create_connection((where[0], int(where[1])), timeout=10) as client:
            client.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            assert client.recv(100).startswith(b"HTTP/1.1 200")
            upstream, _ = index.accept()
            with upstream:
                client.sendall(b"hello")
                assert upstream.recv(5) == b"hello"
                upstream.sendall(b"index")
                assert client.recv(5) == b"index"
        with socket.create_connection((where[0], int(where[1])), timeout=10) as client:
            asked = f"GET http://127.0.0.1:{port}/simple/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            client.sendall(asked)
            upstream, _ = index.accept()
            with upstream:
                assert upstream.recv(len(asked)) == asked  # passed on as it came
        theirs.close()


@pytest.mark.parametrize(
    ("pip_env", "network"),
    [
        ({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/srv/wheels"}, "own"),
        ({"PIP_INDEX_URL": "file:///srv/simple"}, "own"),
        ({}, "proxy"),  # pip's own default: PyPI
        ({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "https://wheels.example.org/"}, "proxy"),
        ({"PIP_INDEX_URL": "https://mirror.example.org/simple"}, "proxy"),
        ({"HTTPS_PROXY": "http://proxy.example.org:3128"}, "host"),
    ],
)
def test_a_builds_network_follows_where_pip_finds_its_packages(pip_env, network) -> None:
    assert builds.index_network(pip_env) == network
