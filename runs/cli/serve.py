"""``simrun serve``: the whole service on this machine, started with one command.

The web server (gunicorn), a Celery worker and beat, and the step of the local backend, as
children of this process (forked once it has set Django up: ``runs.cli.processes``), with
the embedded default when nothing is configured: SQLite,
the store and kombu's filesystem broker under ``SIMRUN_HOME``, the local backend. With
``DATABASE_URL`` and ``CELERY_BROKER_URL`` set, they are PostgreSQL and Redis instead. The
database is migrated at every start (nothing to do after the first); the worker and the web
server start first, the web server takes no request before the worker takes tasks, and the
rest start once the dashboard answers, so that the first answer does not wait for them on a
machine of few cores; a child that dies is started again; Ctrl-C or SIGTERM stops every
child. The processes of the runs are not children: they go on, and the next start adopts
them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from importlib import import_module
from pathlib import Path

from harness.lifecycle import SignalStop
from runs.cli.listeners import listeners
from runs.cli.processes import Child, start, stop_children, supervise

NAME = "serve"
HELP = "run the service on this machine: web server, Celery worker and beat, local backend"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
READY_TIMEOUT_S = 120.0
WORKER_READY = "SIMRUN_WORKER_READY"
"""The file the Celery worker touches once it takes tasks (``simrun_site.celery``)."""
GUNICORN_CONFIG = "python:simrun_site.gunicorn"
WEB_WORKER = "simrun_site.front.Worker"
DEMO_SPEC = Path(__file__).resolve().parents[2] / "docs" / "examples" / "demo.yaml"
DEMO_USER = "demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    parser.add_argument("--web-workers", type=int, default=2, help="web server processes (2)")
    parser.add_argument(
        "--demo", action="store_true", help="create the user demo and submit the example sweep"
    )
    parser.add_argument(
        "--tasks-as-service",
        action="store_true",
        help="run the tasks as this service's user, not as users of their own (as root, "
        "where those cannot reach this Python or the home; docs/team.md)",
    )


def children(args: argparse.Namespace, stepped: bool, home: Path) -> list[Child]:
    """The processes of the service, the worker first and the web server last."""
    from django.conf import settings

    python = sys.executable
    celery = [python, "-m", "celery", "--app", "simrun_site", "--quiet"]
    # Celery runs Django's system checks at each start, whose URL checks import every view
    # and the REST framework's schema: a quarter of a second of the worker's start, on the
    # path to the first answer. The web server imports them anyway, and `manage.py check`
    # (CI) checks the same code.
    no_checks = {"CELERY_SKIP_CHECKS": "1"}
    found = [
        Child(
            "worker",
            [*celery, "worker", "--loglevel", "INFO", "--concurrency", "2"]
            # A polling broker (the filesystem's) has the worker drain it for 2 s at a time
            # and apply acks between drains: with one message per process in flight, a
            # wake-up waits for the next drain. More in flight lets it through at once.
            + ["--prefetch-multiplier", "4"]
            + ["--without-mingle", "--without-gossip", "--without-heartbeat"]
            + ["--hostname", f"simrun-{os.getpid()}@%h"],
            env={WORKER_READY: str(home / "worker-ready"), **no_checks},
            quiet=True,
            first=True,
        ),
        # Learning a run's sources runs their code for up to SIMRUN_LEARN_INSTALL_S: a worker
        # of its own, so it never holds the one the control loop runs on; SIMRUN_LEARNERS
        # at once, the users in turn (runs/control/learning.py).
        Child(
            "learner",
            [*celery, "worker", "--loglevel", "INFO", "-Q", "learning"]
            + ["--concurrency", str(settings.SIMRUN_LEARNERS)]
            + ["--without-mingle", "--without-gossip", "--without-heartbeat"]
            + ["--hostname", f"simrun-learner-{os.getpid()}@%h"],
            env=no_checks,
            quiet=True,
        ),
        Child(
            "beat",
            [*celery, "beat", "--loglevel", "INFO", "--pidfile", ""]
            + ["--schedule", str(private_folder(Path(settings.CELERY_BEAT_SCHEDULE_FILENAME)))],
            env=no_checks,
            quiet=True,
        ),
    ]
    if stepped:
        found.append(Child("steps", [python, "-m", "django", "simrun_steps"]))
    found.append(
        Child(
            "web",
            [python, "-m", "gunicorn", "simrun_site.asgi:application", "-c", GUNICORN_CONFIG]
            + ["--bind", f"{args.host}:{args.port}", "--workers", str(args.web_workers)]
            # uvicorn's loop reads each request: a slow client holds no thread (front.py).
            + ["--worker-class", WEB_WORKER, "--graceful-timeout", "5"]
            # Each worker listens itself and the kernel spreads new connections over them:
            # on one shared socket, the worker that wakes first can take every keep-alive
            # client at once and leave the other idle. port_problem() still refuses a port
            # another server holds, a second serve's included.
            + ["--reuse-port", "--no-control-socket"],
            env={WORKER_READY: str(home / "worker-ready")},
            first=True,
        )
    )
    return found


def private_folder(path: Path) -> Path:
    """``path``, its folder made such that only the service can enter it: what a child writes
    there after the banner (beat's schedule, with the default umask) stays the service's, as
    ``protect_home`` leaves what was made before."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.chmod(0o700)
    return path


TASK_UID_BASE = "SIMRUN_TASK_UID_BASE"


def allowed_hosts(host: str) -> None:
    """Let the web server answer on the address it listens on (unless ALLOWED_HOSTS is set)."""
    if host in LOOPBACK or os.environ.get("ALLOWED_HOSTS"):
        return
    everywhere = host in {"0.0.0.0", "::", ""}
    os.environ["ALLOWED_HOSTS"] = "*" if everywhere else f"localhost,127.0.0.1,[::1],{host}"


def port_problem(host: str, port: int) -> str | None:
    """Why the web server cannot listen on host:port (another server has it, named: a task
    of ``SIMRUN_TASK_NETWORK=host`` could have taken it), None if it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            problem = f"cannot listen on {host}:{port}: {error.strerror}"
            base = os.environ.get("SIMRUN_TASK_UID_BASE", "")
            held = [h.describe(int(base) if base.isdigit() else None) for h in listeners(port)]
            return f"{problem} (held by {'; '.join(held)})" if held else problem
    return None


def prepare_broker() -> None:
    """Create the folders of the filesystem broker (kombu does not)."""
    from django.conf import settings

    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if key in options:
            Path(str(options[key])).mkdir(parents=True, exist_ok=True)


def preload() -> None:
    """Import what each Celery child would import itself at its start (its command line, its
    worker or beat, the broker's transport): half a second of CPU apiece, paid once for the
    learner and beat, forked after it. Not before the first children: on two cores, the first
    answer waited for it (2.31 s against 2.02 s, ``bench/first_start.py``)."""
    from simrun_site.celery import app

    for name in ("celery.bin.celery", "celery.apps.worker", "celery.apps.beat"):
        import_module(name)
    app.connection_for_write().get_transport_cls()  # its module, no connection made


def protect_home(home: Path) -> None:
    """Keep the service's files from the processes of the runs: the home can be crossed (to
    the store) but not listed, and all in it but the store, scratch, venvs and static files
    (the database, the secret key, the broker, the demo login) is the service's alone."""
    from django.conf import settings

    shared = {
        Path(settings.SIMRUN_STORE),
        Path(settings.SIMRUN_SCRATCH),
        Path(settings.STATIC_ROOT),
    }
    shared.add(Path(settings.SIMRUN_SCRATCH).parent / "envs")
    broker = str(settings.CELERY_BROKER_URL)
    if broker.startswith("sqlite:///"):  # made now, so its journals take its mode
        path = Path(broker.removeprefix("sqlite:///"))
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    home.chmod(0o711)
    for entry in home.iterdir():
        if entry not in shared and not entry.is_symlink():
            entry.chmod(entry.stat().st_mode & 0o7700)


def demo(home: Path) -> str:
    """The demo user (its login kept in the home) with the example sweep submitted once, unless
    the backend refuses it (said, and serve goes on)."""
    from django.contrib.auth.models import User

    from harness.tasktypes import task_types
    from runs.cli.user import ensure_user
    from runs.common.errors import CannotRun
    from runs.planning.spec import SpecError
    from runs.planning.spec_document import parse_spec
    from runs.planning.submission import create_run

    kept = home / "demo-login"
    first = not User.objects.filter(username=DEMO_USER).exists()
    login = ensure_user(name=DEMO_USER, token=first, staff=True)  # the admin is advertised
    if login.password is not None:
        kept.write_text(login.password)
        kept.chmod(0o600)
    password = kept.read_text() if kept.exists() else "(set before: simrun user demo --password)"
    user = User.objects.get(username=DEMO_USER)
    if not user.runs.exists():
        text = DEMO_SPEC.read_text()
        try:
            run = create_run(spec=parse_spec(text, types=task_types()), owner=user, text=text)
        except (SpecError, CannotRun) as refused:  # a Slurm team service: the demo user has
            # no login, or the logins cannot reach this Python
            why = str(refused)
            if isinstance(refused, SpecError):
                why = "; ".join(m for messages in refused.errors.values() for m in messages)
            print(f"simrun: the example sweep {DEMO_SPEC.name} was not submitted: {why}")
        else:
            print(f"simrun: submitted the example sweep {DEMO_SPEC.name} as run {run.id}")
    token = (
        f"API token {login.token} (shown only now; simrun login --token)"
        if login.token
        else f"API token: shown at the first start only (`simrun user {DEMO_USER}` makes one)"
    )
    return f"log in as {DEMO_USER} / {password}; {token}"


def wait_until(ready: Callable[[], bool], child: Child, stop: threading.Event) -> bool:
    """Whether ``ready()`` came true before the child died, a stop or the time ran out."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        if child.process is None or child.ended():
            return False
        if ready():
            return True
        stop.wait(0.05)
    return False


def answers(host: str, port: int) -> bool:
    """Whether the dashboard answers: its login page is a 200."""
    address = "127.0.0.1" if host in {"0.0.0.0", ""} else "::1" if host == "::" else host
    connection = HTTPConnection(address, port, timeout=5)
    try:
        connection.request("GET", "/login/")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def banner(args: argparse.Namespace, home: Path, login: str | None) -> str:
    from django.conf import settings

    from runs.backends import get_backend

    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{'127.0.0.1' if args.host in {'0.0.0.0', ''} else shown}:{args.port}/"
    backend = get_backend()
    described = backend.describe()
    lines = [
        f"simrun is running at {url}  (API {url}api/, its documentation {url}api/docs/)",
        login
        or "log in: create a user with `simrun user NAME --staff` (prints a password "
        f"and an API token), then open the URL or run `simrun login {url} -u NAME`",
        f"home {home}; database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}; "
        f"backend {backend.name}" + (f" ({described[0]})" if described else ""),
        "Ctrl-C stops the service; the processes of live runs go on and the next start "
        "adopts them.",
    ]
    lines[3:3] = described[1:]
    return "\n".join(lines)


def task_users(args: argparse.Namespace, home: Path) -> str | None:
    """Choose who the tasks run as, before the settings are read; why serve cannot start, if so.

    As root, each user's tasks run as a user of their own, which must reach this Python and
    the home. Where it cannot (an interpreter or a home below ``/root``), a service would
    accept runs and fail every task: serve starts only with a choice made. ``--tasks-as-service``
    (or ``SIMRUN_TASK_UID_BASE``) is one; ``--demo`` makes it, saying so, so that the README's
    first command works on any machine.
    """
    from runs.backends import task_users_problem

    if args.tasks_as_service:
        os.environ[TASK_UID_BASE] = "0"
        return None
    if TASK_UID_BASE in os.environ or os.geteuid() != 0:
        return None
    roots = [Path(sys.executable).resolve(), home]
    roots += [Path(os.environ[n]) for n in ("SIMRUN_STORE", "SIMRUN_SCRATCH") if os.environ.get(n)]
    problem = task_users_problem(*roots)
    if problem is None:
        return None
    if args.demo:
        os.environ[TASK_UID_BASE] = "0"
        said = "the demo runs its tasks as this service's user (--tasks-as-service)"
        print(f"simrun: {said}: {problem}")
        return None
    return (
        "simrun: as root, each user's tasks run as a user of their own, and here no task "
        f"could start: {problem}. Start with --tasks-as-service to run them as this "
        "service's user (docs/team.md, 'Who a task runs as')."
    )


def run(args: argparse.Namespace) -> int:
    from runs.cli import database
    from runs.cli import home as service_home

    if problem := port_problem(args.host, args.port):
        print(f"simrun: {problem} (choose another with --port)", file=sys.stderr)
        return 1
    allowed_hosts(args.host)
    if refusal := task_users(args, service_home.home()):
        print(refusal, file=sys.stderr)
        return 2
    home = service_home.prepare()
    from django.conf import settings

    from runs.backends import backend_class
    from runs.backends.base import Stepped
    from runs.common.store import pass_only

    prepare_broker()
    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # whitenoise serves from it
    # The store is there once the dashboard answers (a user's files go in it), though its
    # first writer may start after that; the task users cross it without listing it.
    pass_only(Path(settings.SIMRUN_STORE))
    database.migrate()  # a new SQLite one made at once
    protect_home(home)
    stop = SignalStop()  # a threading.Event set by a handler could wait for ever
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stepped = issubclass(backend_class(settings.SIMRUN_BACKEND), Stepped)
    found = children(args, stepped=stepped, home=home)
    try:
        code = start_all(args, found, home, stop)
        if code is None:
            code = supervise(found, home, stop)
    finally:
        stop_children(found)
        print("simrun: stopped; the processes of live runs go on", flush=True)
    # Everything is stopped: spare the interpreter's teardown of Django, seconds of garbage
    # collection on a busy machine.
    sys.stderr.flush()
    os._exit(code)


def start_all(
    args: argparse.Namespace,
    found: list[Child],
    home: Path,
    stop: threading.Event,
) -> int | None:
    """Start the worker and the web server and make the demo meanwhile; the web server takes
    no request before the worker takes tasks (``simrun_site.gunicorn``), so a run it accepts
    is taken at once. Once the dashboard answers, start the other children (each start
    still costs a fraction of a second of CPU, Celery's or gunicorn's own: on two cores, the
    first answer does not wait for them) and print the banner. 1 if one did not start."""
    worker, web = found[0], found[-1]
    ready = Path(worker.env[WORKER_READY])
    ready.unlink(missing_ok=True)
    for child in found:
        if child.first:
            start(child, home)
    login = demo(home) if args.demo else None
    if not wait_until(ready.exists, worker, stop):
        return None if stop.is_set() else not_started("the Celery worker did not start")
    if not wait_until(lambda: answers(args.host, args.port), web, stop):
        if stop.is_set():
            return None
        return not_started(f"the web server did not start on {args.host}:{args.port}")
    preload()
    for child in found:
        if not child.first:
            start(child, home)
    protect_home(home)  # what the children made meanwhile
    print(banner(args, home, login), flush=True)
    return None


def not_started(what: str) -> int:
    print(f"simrun: {what}; stopping", file=sys.stderr)
    return 1
