"""The runs pages: the table of runs and a run's page (its DAG, tasks, attempts and outputs,
live while the run is), with cancel and a done task's output files.

Every fragment has its own URL and its own view, which checks who may see it exactly as its
page does: a fragment can be asked for directly.
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from runs.common import labels, store
from runs.common.errors import Conflict, field_sentences
from runs.common.kept import Kept
from runs.control import cancelling
from runs.models import Run, RunState, TaskState
from runs.reads import accounting, task_files
from runs.reads.access import run_or_404, task_or_404, with_tasks_for
from runs.reads.capped_pages import MAX_PAGE, positive
from runs.reads.file_answers import serve_output
from runs.reads.listed_json import listed_page
from runs.reads.listing import Listing
from runs.reads.live_attempts import SPARK_HEIGHT, SPARK_WIDTH, live_figures
from runs.reads.run_filters import filter_values
from runs.reads.run_page import PageRun, page_run_or_404
from runs.reads.settled import KEPT, settled_key, shown
from runs.reads.shown import shown_run_state
from runs.web.dag import layout
from runs.web.fragments import fragment
from runs.web.results_views import PAGE_PARAMETERS, has_results
from runs.web.run_table import table_rows
from runs.web.timeline import timeline

RUNS_PER_PAGE = 25
"""Rows of the runs table: what a laptop screen shows without much scrolling."""
OUTPUTS_SHOWN = 50
UNIT_FOLDERS = "units/"
"""Where a sweep's units write (``{out}``): listed folded, below the task's own outputs."""


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
        "filters": {
            k: request.GET.get(k, "")
            for k in ("state", "name", "owner", "live", "tag", "param", "created_after")
        },
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


BODIES: Kept[tuple[str, SafeString]] = Kept(KEPT)
"""The state shown and the body of settled runs' pages."""
PAGES: Kept[str] = Kept(KEPT)
"""Settled runs' pages whole, their layout too, written with ``CSRF_SLOT`` where each
request's CSRF token goes."""
PAGE = "runs/run_detail.html"
CONTENT = "runs/run_detail.html#content"
CSRF_SLOT = f"csrf-slot-{secrets.token_hex(16)}"
"""What a kept page's forms carry instead of a CSRF token: a secret of the process, so no
text a user wrote can stand for it."""


def _run_context(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """A run's page: its head, and its body (the tasks' part) with the state its tasks make,
    kept once written for a settled run (``runs.reads.settled``), whose tasks are then not
    read again."""
    return _page_context(request, page_run_or_404(request.user, run_id))


def _page_context(request: HttpRequest, page: PageRun) -> dict[str, Any]:
    """``_run_context`` of the run ``page`` read."""
    run = page.run
    context = {
        "run": run,
        "live": not run.ended,
        "reruns": page.reruns,
        "submitter": page.submitter,
    }

    def write() -> tuple[str, SafeString]:
        tasks = list(with_tasks_for(request.user, run).tasks.all())
        state = shown_run_state(run.state, [t.state for t in tasks])
        body = {**context, "run_state": state, **_body_context(request, run, tasks)}
        html = render_to_string("runs/run_detail.html#body", body, request)
        return state, mark_safe(html)  # noqa: S308 - the template escapes

    context["run_state"], context["body"] = shown(BODIES, run, request, write)
    return context


def _body_context(request: HttpRequest, run: Run, tasks: list[Any]) -> dict[str, Any]:
    """What the body of a run's page shows of its tasks: their outputs, attempts, DAG,
    timeline, usage and results tables."""
    task_files.attach_progress(run, tasks)
    asked = request.GET.get("task", "")
    for task in tasks:
        task.results_query = (
            urlencode({k: request.GET[k] for k in PAGE_PARAMETERS if k in request.GET})
            if task.task_id == asked
            else ""
        )
        outputs, cut = _outputs(task) if task.state == TaskState.DONE else ([], "")
        task.outputs = [o for o in outputs if not o["unit"]]
        task.unit_outputs = [o for o in outputs if o["unit"]]
        task.outputs_cut = cut
        task.results_present = has_results(task)
        if task.started_at is not None:
            end = task.ended_at or run.ended_at or timezone.now()
            task.duration_s = (end - task.started_at).total_seconds()
        for attempt in task.attempts.all():
            attempt.live = live_figures(attempt)
            attempt.spark = attempt.live.sparkline(attempt.memory_gb)
    units_now = {t.task_id: t.units_now for t in tasks}
    return {
        "tasks": tasks,
        "dag": layout(tasks, units_now),
        "dag_phone": layout(tasks, units_now, phone=True),
        "timeline": timeline(run, tasks),
        "timeline_phone": timeline(run, tasks, phone=True),
        "spark": {"width": SPARK_WIDTH, "height": SPARK_HEIGHT},
        "usage": accounting.run_usage(run, tasks),
        "failed_tasks": [t for t in tasks if t.units_failed],
        "results_tasks": [t for t in tasks if t.results_present],
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
        unit = output.path.startswith(UNIT_FOLDERS)
        shown.append({"file": output, "url": url, "preview": preview, "unit": unit})
    return shown, listing.cut


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """A run: its DAG, per task progress, plan and why, attempts, outputs; cancel."""
    page = page_run_or_404(request.user, run_id)
    # One token for the page, as the template's lazy one is: masking it is not free.
    token = get_token(request)
    key = page_key(request, page)
    if key is None:
        return HttpResponse(_page(request, page, token))

    def write() -> str:
        return _page(request, page, CSRF_SLOT)

    return HttpResponse(PAGES.get(key, write).replace(CSRF_SLOT, token))


def _page(request: HttpRequest, page: PageRun, token: str) -> str:
    """A run's page with the CSRF token ``token``: its content, then its layout."""
    context = {**_page_context(request, page), "csrf_token": token}
    content = mark_safe(render_to_string(CONTENT, context, request))  # noqa: S308 - escaped
    frame = {"run": page.run, "content": content, "csrf_token": token}
    return render_to_string(PAGE, frame, request)


def page_key(request: HttpRequest, page: PageRun) -> Hashable | None:
    """What a settled run's page depends on beyond its body's key: its re-runs, the names of
    its owner and of who submitted it, and its viewer's name, whether they are staff (what
    their forms and links offer) and the site's prefix (its links); None for a live run's
    page, or one that shows messages (a redirect's notice, shown once): not kept."""
    body = settled_key(page.run, request)
    if body is None or len(messages.get_messages(request)):
        return None
    names = (page.run.owner.get_username(), page.submitter, request.user.get_username())
    return (body, page.reruns, names, request.user.is_staff, get_script_prefix())


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
    except Conflict as error:
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
@require_POST
def run_labels(request: HttpRequest, run_id: str) -> HttpResponse:
    """Set a run's tags (words, space or comma separated) and note: its owner's, or staff's."""
    run = run_or_404(request.user, run_id)
    if run.owner_id != request.user.pk and not request.user.is_staff:
        messages.warning(request, "Only its owner tags a run or notes on it.")
        return redirect("runs:run-detail", run_id=run_id)
    words = request.POST.get("tags", "").replace(",", " ").split()
    note = request.POST.get("note", "").strip()
    if found := labels.problems(words, note):
        said = [
            sentence if isinstance(problems, dict) else f"{name}: {sentence}"
            for name, problems in found.items()
            for sentence in field_sentences(problems, "tag")
        ]
        messages.warning(request, f"Not saved: {'; '.join(said)}")
    else:
        Run.objects.filter(pk=run.pk).update(tags=labels.kept_tags(words), note=note)
        messages.success(request, "Tags and note saved.")
    return redirect("runs:run-detail", run_id=run_id)


@login_required
def output_file(
    request: HttpRequest, run_id: str, task_id: str, path: str
) -> StreamingHttpResponse:
    """A file of a done task's out/; nothing outside it, whatever the path says."""
    task = task_or_404(request.user, run_id, task_id)
    response = serve_output(task.run_id, task.task_id, path)
    if task.state == TaskState.DONE:
        # The outputs of a done task no longer change: polled pages need not fetch them again.
        response["Cache-Control"] = "private, max-age=600"
    return response
