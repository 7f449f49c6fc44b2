"""The rooms of ``runs/`` and what each may import (docs/architecture.md), read from the source.

Every import counts, those inside functions too: a lazy import is still a dependency. A room
is ``runs.<name>``, a sub-package or a module of the app (``runs.models``, ``runs.tasks``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import pytest

from tests import process_starts, source_trees

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN: dict[str, set[str]] = {
    "common": {"backends", "control", "planning", "reads", "web", "api", "cli", "client", "tasks"},
    "backends": {"control", "planning", "reads", "web", "api", "cli", "client", "tasks", "models"},
    "planning": {"control", "reads", "web", "api", "cli", "client", "tasks"},
    "control": {"reads", "web", "api", "cli", "client", "tasks"},
    "reads": {"control", "web", "api", "cli", "client", "tasks"},
    "api": {"web", "cli", "client", "tasks"},
    "web": {"api", "cli", "client", "tasks"},
    "cli": {"web"},
    "client": {"backends", "control", "planning", "reads", "web", "api", "cli", "common", "tasks"},
}
"""What each room must not import; the backends, control and planning above all never reach
the pages, the API or the command line, and the backends never reach the Celery tasks. The
pages and the API are two edges side by side: what both read lives in ``reads``."""


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = ROOT) -> Iterator[str]:
    """The modules a file imports, anywhere in it; relative imports made absolute."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in source_trees.nodes(path):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


RECORD = {"choices": "models", "querysets": "models"}
"""Modules of the record that ``runs.models`` is made of: one room with it."""


def room(module: str) -> str | None:
    """``runs.control.states`` → ``control``; None outside ``runs``."""
    parts = module.split(".")
    if parts[0] != "runs" or len(parts) < 2:
        return None
    return RECORD.get(parts[1], parts[1])


def rooms_graph() -> dict[str, dict[str, set[str]]]:
    """Room → room it imports → the imports that make it so (``module -> module``)."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted((ROOT / "runs").rglob("*.py")):
        source = module_name(path)
        for target in imported(path):
            here, there = room(source), room(target)
            if here and there and here != there:
                graph[here][there].add(f"{source} -> {target}")
    return graph


def cycle(graph: Mapping[str, Set[str]]) -> list[str]:
    """A cycle of the graph (its nodes, the first repeated last), or [] when it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for nxt in sorted(graph.get(node, ())):
            if found := visit(nxt, [*path, node]):
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        if found := visit(start, []):
            return found
    return []


def test_the_harness_imports_nothing_of_runs_or_django():
    offending = [
        f"{module_name(path)} -> {target}"
        for path in sorted((ROOT / "harness").rglob("*.py"))
        for target in imported(path)
        if target.split(".")[0] in {"runs", "django", "simrun_site"}
    ]
    assert not offending


@pytest.mark.parametrize("here", sorted(FORBIDDEN))
def test_a_room_imports_nothing_of_the_rooms_it_must_not(here):
    graph = rooms_graph()
    offending = sorted(
        line for there in FORBIDDEN[here] & set(graph[here]) for line in graph[here][there]
    )
    assert not offending, f"runs.{here} imports what it must not"


def test_no_two_rooms_import_each_other_even_through_others():
    graph = rooms_graph()
    assert not cycle({here: set(theirs) for here, theirs in graph.items()})


def test_every_room_says_what_lives_there_and_what_it_may_import():
    for init in sorted((ROOT / "runs").glob("*/__init__.py")):
        if init.parent.name in {"migrations", "management", "templatetags"}:
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in docstring, f"{init.relative_to(ROOT)} says not what it may import"


@pytest.mark.parametrize(("one", "other"), [("argo", "local"), ("local", "argo")])
def test_one_backend_imports_nothing_of_the_other(one, other):
    offending = [
        f"{module_name(path)} -> {target}"
        for path in sorted((ROOT / "runs" / "backends" / one).rglob("*.py"))
        for target in imported(path)
        if target == f"runs.backends.{other}" or target.startswith(f"runs.backends.{other}.")
    ]
    assert not offending


def test_the_local_launcher_a_script_needs_only_the_standard_library_the_harness_and_siblings():
    """It starts as ``python launcher.py`` without the service's packages: what it imports, and
    what the siblings it imports by their bare names import, is the stdlib or the harness (the
    launch file is dataclasses: a model library costs each attempt's start). A sibling the service
    imports too may import another by its full name only beside its bare name (the service's
    import and the launcher's of the same module)."""
    folder = ROOT / "runs" / "backends" / "local"
    package = "runs.backends.local"
    siblings = {path.stem for path in folder.glob("*.py")}
    allowed = set(sys.stdlib_module_names) | {"harness", "__future__"}
    seen, todo, offending = set(), ["launcher"], []
    while todo:
        name = todo.pop()
        seen.add(name)
        targets = set(imported(folder / f"{name}.py"))
        bare = {target.split(".")[0] for target in targets}
        for target in sorted(targets):
            top = target.split(".")[0]
            full = target.startswith(f"{package}.")
            sibling = target.removeprefix(f"{package}.").split(".")[0]
            if target == package or (full and sibling in bare):
                continue
            if top in siblings and top != name:
                todo.extend({top} - seen)
            elif top not in allowed and top != name:
                offending.append(f"{name} -> {target}")
    assert not offending
    assert {"launcher", "cgroups", "env", "shm", "budget"} <= seen


def test_the_checks_see_a_relative_import_inside_a_function_and_a_cycle(tmp_path):
    lazy = tmp_path / "runs" / "backends" / "lazy.py"
    lazy.parent.mkdir(parents=True)
    lazy.write_text("def settle_later():\n    from ..tasks import settle\n")
    assert "runs.tasks.settle" in set(imported(lazy, tmp_path))
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}}) == []


def test_the_architecture_page_names_every_room_and_only_files_that_exist():
    page = (ROOT / "docs" / "architecture.md").read_text()
    rooms = {init.parent.name for init in (ROOT / "runs").glob("*/__init__.py")}
    shown = {name for name in rooms if f"`runs/{name}/`" in page}
    assert shown == rooms - {"migrations", "management", "templatetags"}
    missing = [p for p in re.findall(r"(?:runs|tests)/[\w/]+\.py", page) if not (ROOT / p).exists()]
    assert not missing


def backend_packages(root: Path = ROOT) -> set[str]:
    """The backends with a package of their own under ``runs/backends/`` (argo, local, ...)."""
    return {init.parent.name for init in (root / "runs" / "backends").glob("*/__init__.py")}


BACKEND_NAMES = frozenset({"argo", "local", "slurm", "fake"})
"""Every name ``SIMRUN_BACKEND`` takes, those to come included."""


def backend_leaks(root: Path = ROOT) -> list[str]:
    """Imports of a backend's package from outside ``runs/backends/``."""
    packages = {f"runs.backends.{name}" for name in backend_packages(root)}
    return [
        f"{module_name(path, root)} -> {target}"
        for path in sorted((root / "runs").rglob("*.py"))
        if "backends" not in path.relative_to(root / "runs").parts[:1]
        for target in imported(path, root)
        if any(target == p or target.startswith(f"{p}.") for p in packages)
    ]


def _names(node: ast.expr) -> set[str]:
    """The string constants of an expression: itself, or the items of a set, tuple or list."""
    items = node.elts if isinstance(node, ast.Set | ast.Tuple | ast.List) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def backend_comparisons(root: Path = ROOT) -> list[str]:
    """Comparisons with a backend's name (``backend.name == "local"``, ``in {"argo"}``) outside
    ``runs/backends/``: what differs between backends is a member of their protocol."""
    found = []
    for path in sorted((root / "runs").rglob("*.py")):
        if "backends" in path.relative_to(root / "runs").parts[:1]:
            continue
        for node in source_trees.nodes(path):
            if isinstance(node, ast.Compare):
                named = set().union(*(_names(n) for n in [node.left, *node.comparators]))
                if named & BACKEND_NAMES:
                    found.append(f"{module_name(path, root)}:{node.lineno}")
    return found


def test_nothing_outside_the_backends_imports_a_backend():
    assert not backend_leaks()


def test_nothing_outside_the_backends_compares_a_backend_name():
    assert not backend_comparisons()


def test_the_backend_checks_see_a_lazy_import_and_a_comparison_in_a_set(tmp_path):
    (tmp_path / "runs" / "backends" / "argo").mkdir(parents=True)
    (tmp_path / "runs" / "backends" / "argo" / "__init__.py").write_text("")
    reads = tmp_path / "runs" / "reads" / "sneaky.py"
    reads.parent.mkdir(parents=True)
    reads.write_text(
        "def f(run):\n"
        "    from runs.backends.argo import nodes\n"
        "    return run.backend not in {'argo', 'x'} or nodes\n"
    )
    assert backend_leaks(tmp_path) == [
        "runs.reads.sneaky -> runs.backends.argo",
        "runs.reads.sneaky -> runs.backends.argo.nodes",
    ]
    assert backend_comparisons(tmp_path) == ["runs.reads.sneaky:3"]


WALL = "runs.backends.local.wall"
"""The one module that starts a process of a user's code and changes a process's user."""
CHANGES_USER = frozenset(
    {"setuid", "setgid", "setgroups", "seteuid", "setegid", "setreuid", "setregid"}
    | {"setresuid", "setresgid", "initgroups"}
)
USER_KEYWORDS = frozenset({"user", "group", "extra_groups"})
"""The keywords of ``subprocess`` that start a process as another user."""
BEFORE_EXEC = {
    "runs.backends.local.prepare": "the launcher's task enters through wall.enter",
    "runs.cli.serve": "serve's own children die with it, as the service's user",
}
"""Who else may run a function in a child before its exec (``preexec_fn``), and why."""
SUBPROCESS_CALLS = frozenset({"Popen", "run", "call", "check_call", "check_output"})


def user_starts(root: Path = ROOT) -> list[str]:
    """Where a module other than the wall changes a process's user or starts one as another
    user (``os.setuid`` and its kin, ``subprocess`` with ``user=``/``group=``), or runs code
    in a child before its exec without a reason in ``BEFORE_EXEC``."""
    found = []
    for path in sorted([*(root / "runs").rglob("*.py"), *(root / "harness").rglob("*.py")]):
        name = module_name(path, root)
        if name == WALL:
            continue
        for node in source_trees.nodes(path):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            called = called or (node.func.id if isinstance(node.func, ast.Name) else "")
            keywords = {k.arg for k in node.keywords if k.arg}
            if called in CHANGES_USER:
                found.append(f"{name}:{node.lineno} {called}")
            elif called in SUBPROCESS_CALLS and keywords & USER_KEYWORDS:
                found.append(f"{name}:{node.lineno} {called}({sorted(keywords & USER_KEYWORDS)})")
            elif "preexec_fn" in keywords and name not in BEFORE_EXEC:
                found.append(f"{name}:{node.lineno} preexec_fn")
    return found


def test_only_the_wall_starts_a_users_code_or_changes_a_processs_user():
    """Every process of a user's code (a task, a learning, a build) is started behind one wall:
    a second way to start one would be a way around it."""
    assert not user_starts()


def test_the_wall_check_sees_a_start_as_another_user_anywhere(tmp_path):
    sneaky = tmp_path / "runs" / "control" / "sneaky.py"
    sneaky.parent.mkdir(parents=True)
    (tmp_path / "harness").mkdir()
    sneaky.write_text(
        "import os, subprocess\n"
        "def f(uid):\n"
        "    subprocess.Popen(['x'], user=uid)\n"
        "    os.setuid(uid)\n"
        "    subprocess.run(['x'], preexec_fn=lambda: None)\n"
    )
    assert user_starts(tmp_path) == [
        "runs.control.sneaky:3 Popen(['user'])",
        "runs.control.sneaky:4 setuid",
        "runs.control.sneaky:5 preexec_fn",
    ]


def test_nothing_but_the_wall_starts_a_process_of_a_users_code():
    """A start outside the wall names its program (or says in ``ELSEWHERE`` why it may
    not), and the harness's starts (pip, a task's command) are reached only from a script
    the wall runs (``tests/process_starts.py``): on the code before, the launcher of a
    non-root service installed a run's sources itself, outside any wall."""
    modules = process_starts.load(ROOT)
    assert process_starts.foreign_starts(modules) == []
    assert process_starts.unwalled_harness_starts(modules) == []
    for script in process_starts.WALL_SCRIPTS:
        assert process_starts._main_blocks(modules[script]), script


def test_the_start_checks_see_a_handed_argv_a_shell_and_a_harness_start_outside_a_script(
    tmp_path,
):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "tool.py").write_text(
        "import subprocess\n"
        "def build(cmd):\n"
        "    return subprocess.run(cmd)\n"
        "def indirect(cmd):\n"
        "    return build(cmd)\n"
    )
    local = tmp_path / "runs" / "backends" / "local"
    local.mkdir(parents=True)
    (local / "env.py").write_text(
        "from harness.tool import indirect\n"
        "def walled(cmd):\n"
        "    indirect(cmd)\n"
        "if __name__ == '__main__':\n"
        "    walled([])\n"
    )
    (tmp_path / "runs" / "control").mkdir()
    (tmp_path / "runs" / "control" / "sneaky.py").write_text(
        "import os, runpy, subprocess as sp, sys\n"
        "from harness import tool\n"
        "from runs.backends.local import env\n"
        "LAUNCHER = 'x'\n"
        "def f(cmd):\n"
        "    sp.Popen(cmd)\n"
        "    sp.run(['sh', '-c', cmd])\n"
        "    sp.run(['du', '-sb', cmd])\n"
        "    sp.run([sys.executable, str(LAUNCHER), cmd])\n"
        "    sp.run([sys.executable, '-c', cmd])\n"
        "    os.execvp(cmd[0], cmd)\n"
        "    runpy.run_module(cmd[2])\n"
        "def g(cmd):\n"
        "    tool.indirect(cmd)\n"
        "def h(cmd):\n"
        "    env.walled(cmd)\n"
    )
    modules = process_starts.load(tmp_path)
    assert [f for f in process_starts.foreign_starts(modules) if "sneaky" in f] == [
        "runs.control.sneaky:6 sp.Popen(cmd)",
        "runs.control.sneaky:7 sp.run(['sh', '-c', cmd])",
        "runs.control.sneaky:10 sp.run([sys.executable, '-c', cmd])",
        "runs.control.sneaky:11 os.execvp(cmd[0], cmd)",
        "runs.control.sneaky:12 runpy.run_module(cmd[2])",
    ]
    assert process_starts.unwalled_harness_starts(modules) == [
        "runs.control.sneaky.g -> harness.tool.indirect",
        "runs.control.sneaky.h -> runs.backends.local.env.walled",
    ]


MAX_LINES = 500
"""The most lines a module of ``runs/`` or ``harness/`` may have: past it, it holds more than
one thing and is split by what it holds (migrations, which Django writes, excepted)."""


def long_modules(root: Path = ROOT) -> list[str]:
    """The modules of ``runs/`` and ``harness/`` longer than ``MAX_LINES``, with their lengths."""
    found = []
    for path in sorted([*(root / "runs").rglob("*.py"), *(root / "harness").rglob("*.py")]):
        if "migrations" in path.relative_to(root).parts:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.relative_to(root).as_posix()} ({lines} lines)")
    return found


def test_no_module_is_longer_than_the_most_lines_a_module_may_have():
    offending = long_modules()
    assert not offending, f"longer than {MAX_LINES} lines: {', '.join(offending)}"


def test_the_length_check_sees_a_long_module_and_not_a_long_migration(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "harness" / "short.py").write_text("x = 1\n" * MAX_LINES)
    migration = tmp_path / "runs" / "migrations" / "0001_initial.py"
    migration.parent.mkdir(parents=True)
    migration.write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == [f"harness/long.py ({MAX_LINES + 1} lines)"]
