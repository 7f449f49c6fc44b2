"""Submitting runs from the dashboard: the New run form (a spec in YAML or JSON, problems
shown by the path of their field), and a run's Re-run and Resume buttons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from harness.tasktypes import task_types
from runs.common.errors import CannotRun, QueueFull
from runs.models import Run
from runs.planning.reruns import spec_text, submit_rerun
from runs.planning.spec import MAX_DOCUMENT_BYTES, SpecError, validate_spec
from runs.planning.spec_document import parse_spec
from runs.planning.submission import create_run
from runs.reads.access import run_or_404
from runs.web.middleware import past_cap

QUICK_EXAMPLE = """\
name: squares-quick
tasks:
  sweep:
    type: squares
    settings: {n: 200, delay_s: 0.05}
"""


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
