"""Where the service starts processes, read from the source (``tests/test_layering.py``).

Two rules make "one module starts every process of a user's code" (``WALL``) checkable:

- **A start outside the wall names its program.** Every call that starts a process
  (``subprocess``, ``os.exec*``/``spawn*``/``system``/``popen``/``posix_spawn``, ``asyncio``'s
  and ``pty``'s) in ``runs/``, outside the wall, gives a literal argv whose program is a tool of
  the machine that runs no code it is handed (``du``, ``rm``: not a shell, an interpreter, a
  container engine or a cluster's submitter, ``RUNS_CODE``) or the service's Python on a script
  of the service's (``[sys.executable, str(LAUNCHER), …]``). Any other start (an argv the call
  was handed, ``sh -c``, ``docker``) is in ``ELSEWHERE`` with why it may be, and every entry
  there still starts one.
- **The harness's starts are reached only from a script the wall runs.** A function of the
  harness that starts a process, or calls one that does (``harness.venvs.make_venv``,
  ``harness.sources.install_editable``), runs a user's code (pip runs build backends, the
  harness runs tasks): a function of ``runs/`` that reaches one must itself be reached from
  the ``if __name__ == "__main__":`` block of a script the wall runs (``WALL_SCRIPTS``), never
  from the service's own code.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests import source_trees

WALL = "runs.backends.local.wall"
STARTERS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output"}
    | {"getoutput", "getstatusoutput"},
    "os": {"system", "popen", "posix_spawn", "posix_spawnp"}
    | {f"{kind}{how}" for kind in ("exec", "spawn") for how in ("l", "le", "lp", "lpe")}
    | {f"{kind}{how}" for kind in ("exec", "spawn") for how in ("v", "ve", "vp", "vpe")},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
    "runpy": {"run_module", "run_path"},
}
"""The calls that start a process, by the module that has them; ``runpy``'s run a program in
the process that calls them (a fork, as ``python -m`` would in a new one)."""
RUNS_CODE = frozenset(
    {"sh", "bash", "dash", "zsh", "env", "python", "python3", "perl", "ruby", "node"}
    | {"docker", "podman", "kubectl", "sbatch", "srun", "salloc", "ssh", "su", "sudo", "xargs"}
    | {"nohup", "setsid", "timeout", "nice", "chroot", "unshare", "nsenter", "find"}
)
"""Programs that run what they are handed: a start of one is never the service's own."""
ELSEWHERE = {
    "runs.backends.local.prepare": "the task's own process, entered through wall.enter in its "
    "child (cgroups, limits, task user) after the launcher's namespaces and fence",
    "runs.backends.local.launcher": "the docker CLI of a task with an image: the engine runs "
    "the container as the task user, outside the wall (docs/team.md says what it leaves)",
    "runs.backends.local.processes": "docker kill of a task's container, by its name",
    "runs.backends.local.nodes": "docker version: the engine's version, asked of its CLI",
    "runs.backends.slurm.commands": "Slurm's commands: a job runs on the cluster's nodes, "
    "inside Slurm's cgroups, as its owner's login (docs/slurm.md)",
    "runs.cli.processes": "serve's own children, each a fork that runs its command line's "
    "module as python -m would: the web server, Celery's worker, learner and beat, the step",
}
"""The modules other than the wall that may start a process whose program is not their own,
and why."""
WALL_SCRIPTS = frozenset({"runs.backends.local.env"})
"""The modules of ``runs/`` the wall runs as scripts (``builds.Builder.walled``'s argv: a
build's ``env.py packages``/``sources``): their ``__main__`` blocks run behind it."""


@dataclass
class Module:
    """What one module defines, imports and calls, as the checks need it."""

    name: str
    tree: ast.Module
    aliases: dict[str, str] = field(default_factory=dict)
    """A name bound by an import → what it names (``module`` or ``module.attribute``)."""
    functions: dict[str, ast.AST] = field(default_factory=dict)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load(root: Path) -> dict[str, Module]:
    """The modules of ``runs/`` and ``harness/`` below ``root``, their imports resolved (a
    sibling imported by its bare name, as the launcher's scripts do, to its full name)."""
    paths = sorted([*(root / "runs").rglob("*.py"), *(root / "harness").rglob("*.py")])
    modules = {}
    for path in paths:
        name = module_name(path, root)
        module = Module(name, source_trees.tree(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        siblings = {p.stem for p in path.parent.glob("*.py")}
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    full = alias.name
                    if full in siblings and "." not in full:
                        full = f"{package}.{full}"
                    module.aliases[alias.asname or alias.name.split(".")[0]] = (
                        full if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                elif base in siblings:
                    base = f"{package}.{base}"
                for alias in node.names:
                    module.aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        module.functions[f"{node.name}.{item.name}"] = item
        modules[name] = module
    return modules


def called(module: Module, call: ast.Call) -> str | None:
    """The full name of what a call calls (``subprocess.run``, ``harness.venvs.make_venv``,
    a function of the same module), None when the source does not say."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in module.functions:
            return f"{module.name}.{func.id}"
        return module.aliases.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        base = module.aliases.get(func.value.id)
        return f"{base}.{func.attr}" if base else None
    return None


def starts(full: str | None) -> bool:
    """Whether a call of this full name starts a process."""
    if not full:
        return False
    base, _, attr = full.rpartition(".")
    return attr in STARTERS.get(base, ())


def _own_program(call: ast.Call) -> bool:
    """Whether a start names its program: a literal argv whose program runs nothing it is
    handed, or the service's Python on a script constant of the service's."""
    argv = call.args[0] if call.args else next((k.value for k in call.keywords), None)
    if not isinstance(argv, ast.List | ast.Tuple) or not argv.elts:
        return False
    program, rest = argv.elts[0], argv.elts[1:]
    if isinstance(program, ast.Constant) and isinstance(program.value, str):
        return program.value.rsplit("/", 1)[-1] not in RUNS_CODE
    if ast.unparse(program) != "sys.executable" or not rest:
        return False
    script = rest[0]
    if isinstance(script, ast.Call) and ast.unparse(script.func) == "str" and script.args:
        script = script.args[0]
    return isinstance(script, ast.Name) and script.id.isupper()


def foreign_starts(modules: dict[str, Module]) -> list[str]:
    """Starts in ``runs/`` outside the wall and ``ELSEWHERE`` that do not name their program,
    and the entries of ``ELSEWHERE`` that start no such process any more."""
    found, used = [], set()
    for name, module in modules.items():
        if not name.startswith("runs.") or name == WALL:
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call) and starts(called(module, node)):
                if _own_program(node):
                    continue
                if name in ELSEWHERE:
                    used.add(name)
                else:
                    found.append(f"{name}:{node.lineno} {ast.unparse(node)[:60]}")
    return found + [f"{name}: in ELSEWHERE, starts none" for name in sorted(set(ELSEWHERE) - used)]


def _calls(module: Module, body: ast.AST) -> set[str]:
    return {
        full
        for node in ast.walk(body)
        if isinstance(node, ast.Call) and (full := called(module, node)) is not None
    }


def _main_blocks(module: Module) -> list[ast.If]:
    return [
        node
        for node in module.tree.body
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
    ]


def unwalled_harness_starts(modules: dict[str, Module]) -> list[str]:
    """Where a function of ``runs/`` that no ``__main__`` block of ``runs/`` reaches calls
    into the harness's process starts (a function of the harness that starts one, or of
    ``runs/`` that reaches one only a script may call), with what it calls."""
    calls = {
        f"{module.name}.{function}": _calls(module, body)
        for module in modules.values()
        for function, body in module.functions.items()
    }
    # The harness's functions that start a process, themselves or through another.
    reaching = {
        function
        for function, made in calls.items()
        if function.startswith("harness.") and any(map(starts, made))
    }
    reaching_runs: dict[str, set[str]] = defaultdict(set)
    while True:
        grown = False
        for function, made in calls.items():
            if function.startswith(WALL + "."):
                continue
            through = made & reaching
            if through and function not in reaching:
                reaching.add(function)
                grown = True
            if function.startswith("runs.") and through:
                reaching_runs[function] |= through
        if not grown:
            break
    # What the scripts the wall runs (their __main__ blocks) reach.
    from_main = {
        full
        for module in modules.values()
        if module.name in WALL_SCRIPTS
        for block in _main_blocks(module)
        for full in _calls(module, block)
    }
    while grown_by := {f for caller in from_main for f in calls.get(caller, ())} - from_main:
        from_main |= grown_by
    entries = {f for f in reaching if f.startswith("harness.") or f in from_main}
    return [
        f"{function} -> {', '.join(sorted(through & entries))}"
        for function, through in sorted(reaching_runs.items())
        if function not in from_main and through & entries
    ]
