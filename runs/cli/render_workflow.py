"""``simrun render-workflow SPEC [--run-id ID]``: the Argo Workflow a run spec would become.

Needs no cluster and no database: the spec is validated, planned without observations (the
task types' defaults, or the spec's overrides) and built as the Argo backend submits it, with
the cluster of the settings (``SIMRUN_K8S_NAMESPACE``, ``SIMRUN_KUEUE_QUEUE``, …). The output
can be inspected or given to ``kubectl create -f -``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

NAME = "render-workflow"
HELP = "print the Argo Workflow a run spec would become (no cluster or database needed)"
RUN_ID = re.compile(r"^[a-z][a-z0-9]{0,15}$")
RESERVED_PREVIEW = "(chosen at submission)"
RENDERED = "argo"
"""The backend whose submission this command shows."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="the run spec, YAML or JSON; - reads standard input")
    parser.add_argument(
        "--run-id", default="preview", help="the run id to render with (default: preview)"
    )
    parser.add_argument("--output", "-o", choices=["yaml", "json"], default="yaml")


def setup_django() -> None:
    """Configure Django from the service's settings, without a secret of its own: rendering
    signs nothing and touches no database."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "simrun_site.settings")
    os.environ.setdefault("SECRET_KEY", "simrun-render-workflow-signs-nothing")
    django.setup()


def render(text: str, *, run_id: str) -> dict[str, Any]:
    """The Workflow of a spec; ``SpecError`` for a bad spec, ValueError for a task that
    cannot run on the cluster."""
    from django.conf import settings

    from harness.tasktypes import task_types
    from runs.backends import backend_class, cluster_config
    from runs.backends.base import Renders
    from runs.planning.images import resolve
    from runs.planning.learned_types import run_types
    from runs.planning.planner import plan_run
    from runs.planning.records import spec_record
    from runs.planning.spec_document import parse_spec

    if not RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} must match [a-z][a-z0-9]*, at most 16 characters")
    cluster = cluster_config()
    # A type the spec's sources ship is learned from them, as the submission learns it.
    spec, types = run_types(parse_spec(text, types=task_types()))
    plans = plan_run(spec, types=types, extra_workers=True)
    record = spec_record(
        spec,
        types,
        run_id=run_id,
        image=resolve(spec.environment.model_dump(), cluster).image,
        reserved_node=RESERVED_PREVIEW if spec.reserve_node else "",
        store=Path(settings.SIMRUN_STORE),
    )
    argo = backend_class(RENDERED)
    assert issubclass(argo, Renders)
    return argo.render(record=record, plans=plans, types=types, cluster=cluster)


def run(args: argparse.Namespace) -> int:
    setup_django()
    from runs.planning.spec import SpecError

    try:
        text = sys.stdin.read() if args.spec == "-" else Path(args.spec).read_text()
    except OSError as error:
        print(f"simrun render-workflow: cannot read {args.spec}: {error}", file=sys.stderr)
        return 2
    try:
        manifest = render(text, run_id=args.run_id)
    except SpecError as error:
        for path, messages in error.errors.items():
            print(f"{path}: {' '.join(messages)}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"simrun render-workflow: {error}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(manifest, indent=2))
    else:
        print(yaml.safe_dump(manifest, sort_keys=False), end="")
    return 0
