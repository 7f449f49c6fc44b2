"""serve's children as ``runs.cli.processes`` forks them: each runs its command line's module as
``python -m`` would, as ``subprocess`` would have started it, ends with serve and is killed when
it will not stop.

A helper process plays serve (Django's settings read, no database opened) and forks a probe
module of the test's own; the probe reports what it saw into the home.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.e2e.service import CONFIGURATION, gone
from tests.polling import wait_for

PROBE = """\
import json, os, signal, sys
from pathlib import Path

mode = sys.argv[-1]
home = Path.cwd()
if mode == "report":
    print("said on standard output")
    report = {
        "name": __name__,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "env": os.environ.get("PROBE"),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stdout": os.readlink("/proc/self/fd/1"),
        "title": Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode().strip(),
    }
    (home / "report.json").write_text(json.dumps(report))
    sys.exit(3)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
(home / f"{mode}.pid").write_text(str(os.getpid()))
while True:
    signal.pause()
"""

SERVE = """\
import json, sys, time
from pathlib import Path
from runs.cli import processes
from runs.cli.processes import Child, start, stop_children

home = Path(sys.argv[1])
modes = sys.argv[2:]
found = [
    Child(mode, [sys.executable, "-m", "probe", "--flag", "a b", mode], {"PROBE": mode}, True)
    for mode in modes
]
for child in found:
    start(child, home)
if modes == ["report"]:
    found[0].process.join()
else:
    while not all((home / f"{mode}.pid").exists() for mode in modes):
        time.sleep(0.01)
    print("ready", flush=True)
    if sys.stdin.readline().strip() == "stop":
        processes.STOP_TIMEOUT_S = 0.5
        stop_children(found)
print(json.dumps([child.process.exitcode for child in found]), flush=True)
"""


def serve(tmp_path: Path, *modes: str) -> subprocess.Popen[str]:
    """The helper, forking one probe for each mode, its home ``tmp_path / "home"``."""
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "serve.py").write_text(SERVE)
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONFIGURATION)}
    root = Path(__file__).resolve().parents[2]
    env |= {"PYTHONPATH": f"{tmp_path}:{root}", "SECRET_KEY": "x"}
    env |= {"DJANGO_SETTINGS_MODULE": "simrun_site.settings", "SIMRUN_HOME": str(tmp_path)}
    return subprocess.Popen(
        [sys.executable, str(tmp_path / "serve.py"), str(tmp_path / "home"), *modes],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_child_runs_its_module_as_python_m_would_with_its_line_as_its_title(tmp_path):
    helper = serve(tmp_path, "report")
    out, _ = helper.communicate(timeout=60)

    assert helper.returncode == 0 and json.loads(out.splitlines()[-1]) == [3]
    report = json.loads((tmp_path / "home" / "report.json").read_text())
    assert report["name"] == "__main__"
    assert report["argv"][0] == str(tmp_path / "probe.py")
    assert report["argv"][1:] == ["--flag", "a b", "report"]
    assert report["cwd"] == str(tmp_path / "home")
    assert report["env"] == "report"
    assert report["stdin"] == report["stdout"] == "/dev/null"  # quiet: its output dropped
    assert report["title"] == f'{sys.executable} -m probe --flag "a b" report'
    assert "said on standard output" not in out


def test_a_child_ends_when_serve_is_killed_outright(tmp_path):
    helper = serve(tmp_path, "waiting")
    assert helper.stdout is not None and helper.stdout.readline().strip() == "ready"
    pid = int((tmp_path / "home" / "waiting.pid").read_text())
    assert not gone(pid)

    helper.send_signal(signal.SIGKILL)
    helper.wait(timeout=30)

    wait_for(lambda: gone(pid), 30, f"the child {pid} to end with its parent")


def test_a_child_that_ignores_the_stop_is_killed_after_the_stop_timeout(tmp_path):
    helper = serve(tmp_path, "waiting", "stubborn")
    assert helper.stdout is not None and helper.stdout.readline().strip() == "ready"

    out, _ = helper.communicate("stop\n", timeout=60)

    assert json.loads(out.splitlines()[-1]) == [-signal.SIGTERM, -signal.SIGKILL]
