"""The dashboard's pages (HTMX): one view and one template per page, fragments as partials.

Every fragment has its own URL and its own view, which checks who may see it exactly as its
page does: a fragment can be asked for directly. A fragment is polled only while something
it shows is live; once nothing is, its view answers 286 and htmx stops polling.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import HTMX_STOP_POLLING
from prometheus_client import CONTENT_TYPE_LATEST

from harness.tasktypes import task_types
from runs.api.filters import filter_values
from runs.api.listed_json import listed_page
from runs.api.listing import Listing
from runs.api.pagination import MAX_PAGE, positive
from runs.api.task_views import serve_output
from runs.common import store
from runs.control import cancelling, reservations
from runs.control.states import shown_run_state
from runs.models import FINAL_TASK_STATES, Run, RunState, TaskState
from runs.planning.planning_figures import evidence_figures, planning_figures
from runs.planning.reruns import spec_text, submit_rerun
from runs.planning.spec import MAX_DOCUMENT_BYTES, SpecError, parse_spec, validate_spec
from runs.planning.submission import CannotRun, QueueFull, create_run
from runs.reads import accounting, capacity, task_files, task_logs
from runs.reads.access import (
    run_or_404,
    run_with_tasks_or_404,
    task_or_404,
    visible_observations,
)
from runs.reads.live_attempts import SPARK_HEIGHT, SPARK_WIDTH, live_figures
from runs.reads.run_reads import rerun_ids
from runs.reads.task_logs import DEFAULT_TAIL
from runs.web.charts import observation_chart
from runs.web.dag import layout
from runs.web.middleware import past_cap
from runs.web.results_views import has_results
from runs.web.run_table import table_rows
from runs.web.timeline import timeline

RUNS_PER_PAGE = 25
"""Rows of the runs table: what a laptop screen shows without much scrolling."""
OUTPUTS_SHOWN = 50
OBSERVATIONS_CHARTED = 200
TAIL_CHOICES = [100, 200, 1000, 5000]
QUICK_EXAMPLE = """\
name: squares-quick
tasks:
  sweep:
    type: squares
    settings: {n: 200, delay_s: 0.05}
"""


def fragment(
    request: HttpRequest, template: str, context: dict[str, Any], *, live: bool
) -> HttpResponse:
    """Render a fragment; 286 (stop polling) when nothing it shows is live any more."""
    return render(request, template, context, status=200 if live else HTMX_STOP_POLLING)


# Runs


def _run_list_context(request: HttpRequest) -> dict[str, Any]:
    values, errors = filter_values(request.GET)
    number = positive(request.GET.get("page"), 1, MAX_PAGE) or 1
    page = listed_page(Listing.of(request.user, values), number, RUNS_PER_PAGE, timezone.now())
    query = request.GET.copy()
    query.pop("page", None)
    zone = timezone.get_current_timezone()
    # The rows' links share a prefix: one reverse() for the page, not one per row.
    base = reverse("runs:run-detail", args=["-"]).removesuffix("-/")
    rows, any_live = table_rows(page.rows, zone, base)
    return {
        "rows": rows,
        "any_live": any_live,
        "filters": {k: request.GET.get(k, "") for k in ("state", "name", "owner", "live")},
        "filter_errors": errors,
        "states": RunState.choices,
        "count": page.count,
        "count_exact": page.count_exact,
        "page": number,
        "previous_page": number - 1 if number > 1 else None,
        "next_page": number + 1 if page.has_next else None,
        "query": query.urlencode(),
        "full_query": request.GET.urlencode(),
    }


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    """Runs: a table with state, progress, duration and owner; live while a shown run is."""
    return render(request, "runs/run_list.html", _run_list_context(request))


@login_required
def run_list_table(request: HttpRequest) -> HttpResponse:
    context = _run_list_context(request)
    return fragment(request, "runs/run_list.html#table", context, live=context["any_live"])


def _examples() -> list[tuple[str, str]]:
    """Example specs to start from: the quick squares sweep and ``docs/examples/*.yaml``."""
    found = [("squares (quick)", QUICK_EXAMPLE)]
    for path in sorted((Path(settings.BASE_DIR) / "docs" / "examples").glob("*.yaml")):
        found.append((path.name, path.read_text()))
    return found


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    """Submit a run: a spec in YAML or JSON; problems shown by the path of their field.

    With ``rerun`` (a run's id) the form starts from that run's spec, and the run submitted
    from it is linked to it as its re-run; one submitted with Resume reuses what that run
    finished (docs/resume.md).
    """
    rerun_id = request.POST.get("rerun_of") or request.GET.get("rerun") or ""
    source = run_or_404(request.user, rerun_id) if rerun_id else None
    text = spec_text(source) if source else ""
    errors: dict[str, list[str]] = {}
    error_line: int | None = None  # where the text stopped reading as YAML: marked in the editor
    past = past_cap(request)
    unavailable = full = False
    if request.method == "POST" and past is not None:
        text, errors = what_fits(request.POST.get("spec", ""), *past)
    elif request.method == "POST":
        text = request.POST.get("spec", "")
        try:
            spec = parse_spec(text, types=task_types())
            assert isinstance(request.user, User)  # login_required: only users get here
            if source is None:
                run = create_run(spec=spec, owner=request.user, text=text)
            else:
                resume = request.POST.get("resume") == "1"
                run = submit_rerun(
                    source=source, spec=spec, actor=request.user, text=text, resume=resume
                )
        except SpecError as error:
            errors, error_line = error.errors, error.line
        except CannotRun as error:  # the text stays in the form; the service needs a fix
            messages.error(request, f"Not submitted: {error}")
            unavailable = True
        except QueueFull as error:  # the text stays in the form, for when runs have ended
            messages.error(request, f"Not submitted: {error}")
            full = True
        else:
            return redirect("runs:run-detail", run_id=run.id)
    return render(
        request,
        "runs/run_new.html",
        {
            "text": text,
            "errors": errors,
            "error_line": error_line,
            "examples": _examples(),
            "source": source,
        },
        status=413
        if past is not None
        else 400
        if errors
        else 503
        if unavailable
        else 429
        if full
        else 200,
    )


def what_fits(text: str, size: int | None, cap: int) -> tuple[str, dict[str, list[str]]]:
    """A spec cut off by a form past its cap: its first lines that a spec may hold
    (``MAX_DOCUMENT_BYTES``), and the error that says so."""
    kept = text.encode()[:MAX_DOCUMENT_BYTES].decode(errors="ignore")
    if "\n" in kept:
        kept = kept[: kept.rindex("\n") + 1]
    sent = f"{size / 1e6:.1f} MB" if size is not None else "more"
    message = (
        f"the form sent {sent}, more than the {cap / 2**20:g} MiB it may, and a specification "
        f"may hold {MAX_DOCUMENT_BYTES // 2**20} MiB: its first {len(kept.encode()) // 1024} KiB "
        "are kept below, nothing was submitted. Large inputs belong in settings or sources."
    )
    return kept, {"spec": [message]}


@login_required
@require_POST
def run_rerun(request: HttpRequest, run_id: str) -> HttpResponse:
    """Submit a run's spec again, as it was; the new run's page is shown."""
    return _again(request, run_id, resume=False)


@login_required
@require_POST
def run_resume(request: HttpRequest, run_id: str) -> HttpResponse:
    """Resume a run as it was: a re-run that reuses what it finished; the new run's page."""
    return _again(request, run_id, resume=True)


def _again(request: HttpRequest, run_id: str, *, resume: bool) -> HttpResponse:
    """Re-run (or resume) a run with its spec as it was."""
    source = run_or_404(request.user, run_id)
    assert isinstance(request.user, User)  # login_required: only users get here
    what = "resumed" if resume else "re-run"
    try:
        spec = validate_spec(source.spec, types=task_types())
        run = submit_rerun(source=source, spec=spec, actor=request.user, resume=resume)
    except SpecError as error:
        if "resume_of" in error.errors:
            messages.error(request, f"Run {run_id} was not resumed: {error}")
            return redirect("runs:run-detail", run_id=run_id)
        # The spec no longer validates (a task type gone): let the user edit it.
        messages.warning(request, f"The spec of run {run_id} needs changes: {error}")
        return redirect(f"{reverse('runs:run-new')}?rerun={run_id}")
    except (CannotRun, QueueFull) as error:
        messages.error(request, f"Run {run_id} was not {what}: {error}")
        return redirect("runs:run-detail", run_id=run_id)
    verb = "resumes" if resume else "re-runs"
    messages.success(request, f"Run {run.id} {verb} {source.id}{as_owner(run, request.user)}.")
    return redirect("runs:run-detail", run_id=run.id)


def as_owner(run: Run, actor: Any) -> str:
    """What a re-run of another user's run says of whose code runs as whom."""
    if run.owner_id == actor.pk:
        return ""
    owner = run.owner.get_username()
    return f", as {owner}'s run: its code runs as {owner}'s task user, never as yours"


def _run_context(request: HttpRequest, run_id: str) -> dict[str, Any]:
    run = run_with_tasks_or_404(request.user, run_id)
    tasks = list(run.tasks.all())
    task_files.attach_progress(run, tasks)
    for task in tasks:
        outputs, cut = _outputs(task) if task.state == TaskState.DONE else ([], "")
        task.outputs, task.outputs_cut = outputs, cut  # type: ignore[attr-defined]
        task.results_present = has_results(task)  # type: ignore[attr-defined]
        if task.started_at is not None:
            end = task.ended_at or run.ended_at or timezone.now()
            task.duration_s = (end - task.started_at).total_seconds()  # type: ignore[attr-defined]
        for attempt in task.attempts.all():
            attempt.live = live_figures(attempt)  # type: ignore[attr-defined]
            attempt.spark = attempt.live.sparkline(attempt.memory_gb)  # type: ignore[attr-defined]
    units_now = {t.task_id: t.units_now for t in tasks}  # type: ignore[attr-defined]
    return {
        "run": run,
        "run_state": shown_run_state(run.state, [t.state for t in tasks]),
        "tasks": tasks,
        "dag": layout(tasks, units_now),
        "dag_phone": layout(tasks, units_now, phone=True),
        "live": not run.ended,
        "reruns": rerun_ids(request.user, run),
        "timeline": timeline(run, tasks),
        "timeline_phone": timeline(run, tasks, phone=True),
        "spark": {"width": SPARK_WIDTH, "height": SPARK_HEIGHT},
        "usage": accounting.run_usage(run, tasks),
    }


def _outputs(task: Any) -> tuple[list[dict[str, Any]], str]:
    """The outputs of a done task for its card (a URL each where its name can be one, the
    start of small texts), and why the list is incomplete (too deep, too many), if it is."""
    folder = store.task_folder(task.run_id, task.task_id)
    listing = task_files.output_files(folder, limit=OUTPUTS_SHOWN)
    shown = []
    for output in listing.files:
        url = (
            reverse("runs:output-file", args=[task.run_id, task.task_id, output.path])
            if output.linkable
            else ""
        )
        preview = (
            task_files.preview(folder, output.path)
            if url and output.inline and not output.is_image
            else ""
        )
        shown.append({"file": output, "url": url, "preview": preview})
    return shown, listing.cut


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """A run: its DAG, per task progress, plan and why, attempts, outputs; cancel."""
    return render(request, "runs/run_detail.html", _run_context(request, run_id))


@login_required
def run_live(request: HttpRequest, run_id: str) -> HttpResponse:
    context = _run_context(request, run_id)
    return fragment(request, "runs/run_detail.html#live", context, live=context["live"])


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    """Cancel a run (the record is written at once; the backend's pods end after)."""
    run = run_or_404(request.user, run_id)
    try:
        cancelling.request_cancel(run)
    except cancelling.Conflict as error:
        level, notice = messages.WARNING, str(error)
    else:
        level, notice = messages.SUCCESS, f"Run {run.id} cancelled."
    if not request.htmx:  # type: ignore[attr-defined]
        messages.add_message(request, level, notice)
        return redirect("runs:run-detail", run_id=run_id)
    context = _run_context(request, run_id)
    context["notice"] = {"level": messages.DEFAULT_TAGS[level], "text": notice}
    return fragment(request, "runs/run_detail.html#live", context, live=context["live"])


@login_required
def output_file(request: HttpRequest, run_id: str, task_id: str, path: str) -> FileResponse:
    """A file of a done task's out/; nothing outside it, whatever the path says."""
    task = task_or_404(request.user, run_id, task_id)
    response = serve_output(task.run_id, task.task_id, path)
    if task.state == TaskState.DONE:
        # The outputs of a done task no longer change: polled pages need not fetch them again.
        response["Cache-Control"] = "private, max-age=600"
    return response


# Logs


def _tail(request: HttpRequest) -> int:
    tail = positive(request.GET.get("tail"), DEFAULT_TAIL, max(TAIL_CHOICES))
    return tail or DEFAULT_TAIL


def _log_context(request: HttpRequest, task: Any, name: str) -> dict[str, Any]:
    tail = _tail(request)
    query = request.GET.get("q", "")[:200].replace("\x00", "")
    text = task_logs.read_log(task, name, tail=tail)
    if text is None:
        raise Http404(f"no log {name!r}")
    shown = task_files.search_lines(text.text, query) if query else text.text
    return {
        "task": task,
        "run": task.run,
        "log": text.log,
        "text": shown,
        "lines": shown.count("\n"),
        "q": query,
        "tail": tail,
        "tails": TAIL_CHOICES,
    }


def _log_page_context(request: HttpRequest, task: Any) -> dict[str, Any]:
    """The logs of a task and the one shown; ``waiting`` while none exists yet but may come."""
    logs = task_logs.task_logs(task, tail_lines=1)
    names = [log.name for log in logs]
    name = request.GET.get("log") or next(
        (log.name for log in reversed(logs) if log.running), names[-1] if names else ""
    )
    if name and name not in names:
        raise Http404(f"no log {name!r}")
    waiting = not logs and (task.state not in FINAL_TASK_STATES or task.run.live)
    context = {
        "task": task,
        "run": task.run,
        "logs": logs,
        "log": None,
        "tail": _tail(request),
        "waiting": waiting,
    }
    if name:
        context |= _log_context(request, task, name)
    return context


@login_required
def task_log_page(request: HttpRequest, run_id: str, task_id: str) -> HttpResponse:
    """The logs of a task: one per attempt, its tail, following while it runs, searchable.

    Opened before the task's processes start, the page polls until the first log appears,
    then shows it live.
    """
    task = task_or_404(request.user, run_id, task_id)
    return render(request, "runs/task_logs.html", _log_page_context(request, task))


@login_required
def task_log_layout(request: HttpRequest, run_id: str, task_id: str) -> HttpResponse:
    task = task_or_404(request.user, run_id, task_id)
    context = _log_page_context(request, task)
    return fragment(request, "runs/task_logs.html#layout", context, live=context["waiting"])


@login_required
def task_log_text(request: HttpRequest, run_id: str, task_id: str, name: str) -> HttpResponse:
    task = task_or_404(request.user, run_id, task_id)
    context = _log_context(request, task, name)
    return fragment(request, "runs/task_logs.html#log", context, live=context["log"].running)


# Machines


def _cluster_context(request: HttpRequest) -> dict[str, Any]:
    try:
        nodes = capacity.cluster_for(request.user)
    except capacity.BackendUnavailable as error:
        return {"nodes": [], "error": str(error), "live": True}
    return {"nodes": nodes, "error": "", "live": any(use.pod_count for use in nodes)}


@login_required
def placements(request: HttpRequest) -> HttpResponse:
    """The pods (processes) running now, grouped by node, with each node's use as bars."""
    return render(request, "runs/placements.html", _cluster_context(request))


@login_required
def placements_live(request: HttpRequest) -> HttpResponse:
    context = _cluster_context(request)
    return fragment(request, "runs/placements.html#nodes", context, live=context["live"])


@login_required
def nodes(request: HttpRequest) -> HttpResponse:
    """Reservations: the nodes, the run holding each, release (staff)."""
    context = _cluster_context(request)
    context["nodes"] = [use for use in context["nodes"] if use.node is not None]
    return render(request, "runs/nodes.html", context)


@login_required
@require_POST
def node_release(request: HttpRequest, name: str) -> HttpResponse:
    if not request.user.is_staff:
        raise PermissionDenied("only staff release reservations")
    context = _cluster_context(request)
    node = next((use for use in context["nodes"] if use.name == name and use.node), None)
    holder = reservations.holder_of(node=name, reserved_by=node.reserved_run if node else None)
    if holder is None:
        messages.warning(request, f"No run of the record holds {name}.")
    else:
        try:
            reservations.release_reservation(run=holder, node=name)
        except reservations.ReleaseRefused as error:
            messages.warning(request, str(error))
        else:
            messages.success(request, f"{name} will be released from run {holder.id}.")
    return redirect("runs:nodes")


# Metrics

LOOPBACK = frozenset({"127.0.0.1", "::1"})


def _may_scrape(request: HttpRequest) -> bool:
    """Staff, the bearer of the metrics token, or (when allowed) anyone on this machine."""
    if request.user.is_staff:
        return True
    token = settings.SIMRUN_METRICS_TOKEN
    offered = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if token and hmac.compare_digest(offered.encode(), token.encode()):
        return True
    return settings.SIMRUN_METRICS_LOOPBACK and request.META.get("REMOTE_ADDR") in LOOPBACK


def metrics(request: HttpRequest) -> HttpResponse:
    """The service's metrics for Prometheus (runs/common/metrics.py)."""
    if not _may_scrape(request):
        return HttpResponse(
            "metrics need a staff login or the bearer token SIMRUN_METRICS_TOKEN\n",
            status=403,
            content_type="text/plain",
        )
    from runs.common import metrics as figures  # prometheus-client: only where metrics are asked

    return HttpResponse(figures.exposition(), content_type=CONTENT_TYPE_LATEST)


# Observations


@login_required
def observations(request: HttpRequest) -> HttpResponse:
    """Per task type: peak memory per process against its sizing, and the planning figure."""
    keys = visible_observations(request.user).order_by().values_list("task_type", flat=True)
    figures = planning_figures() + evidence_figures(keys.distinct())
    by_name = {f.name: f for f in figures}
    name = request.GET.get("type") or next(
        (f.name for f in figures if f.observations), figures[0].name if figures else ""
    )
    if name not in by_name:
        raise Http404(f"no task type {name!r}")
    rows = list(visible_observations(request.user).filter(task_type=name)[:OBSERVATIONS_CHARTED])
    figure = by_name[name]
    return render(
        request,
        "runs/observations.html",
        {
            "figures": figures,
            "figure": figure,
            "observations": rows,
            "chart": observation_chart(rows[::-1], figure.per_worker_gb) if rows else "",
            "weeks": accounting.weekly_usage(
                visible_observations(request.user).filter(task_type=name)
            ),
            "last_week": accounting.recent_usage(visible_observations(request.user)),
        },
    )
