"""The logs page of a task: one log per attempt of each process, its tail, followed while it
runs, searchable.

Every fragment has its own URL and its own view, which checks who may see it exactly as its
page does: a fragment can be asked for directly.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import FINAL_TASK_STATES
from runs.reads import task_files, task_logs
from runs.reads.access import task_or_404
from runs.reads.capped_pages import positive
from runs.reads.task_logs import DEFAULT_TAIL
from runs.web.fragments import fragment

TAIL_CHOICES = [100, 200, 1000, 5000]


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
