"""The client of a simrun server's REST API: every call the CLI and a notebook make.

All HTTP goes through ``request`` of its session (``runs.client.session``), which turns every
answer that is no success into one of the exceptions of ``runs.client.errors``. Never imports
Django.
"""

from __future__ import annotations

import io
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import yaml

from runs.client import frames
from runs.client.config import obtain_token, write_config
from runs.client.errors import (
    Ambiguous,
    InvalidRequest,
    LocalFileError,
    NotFound,
    RunFailed,
    Unavailable,
    no_run,
)
from runs.client.frames import Rows, rows_csv
from runs.client.labels import Labels
from runs.client.learning import learned
from runs.client.progress import shown, size_text
from runs.client.run import ENDED, Run
from runs.client.specs import Spec, local_sources, names_a_file, read_document

POLL_S = 1.0
OUTAGE_S = 60.0
"""How long a follower waits for a server that stopped answering before it gives up."""
PAGE_SIZE = 200
"""The most runs the list API gives in one page."""


def no_task(run_id: str, task: str) -> str:
    return f"not found: no task {task!r} in a run {run_id!r} you may see"


RESULT_PAGE = 1000


"""Rows a page of results brings: the most the API gives at once."""


class Client(Labels):
    """A user's session with a simrun server.

    ``Client()`` uses ``SIMRUN_URL`` and ``SIMRUN_TOKEN``, else what ``simrun login`` saved;
    ``Client(url, token)`` a server and token of your own. Runs are returned as ``Run``
    objects that know their client: ``client.submit("sweep.yaml").wait().frame(...)``.
    """

    @classmethod
    def login(cls, url: str, username: str, password: str, *, save: bool = False) -> Client:
        """A client with a new token for a user; ``save=True`` keeps it as ``simrun login``
        does, for later ``Client()`` and the ``simrun`` commands."""
        token = obtain_token(url, username, password)
        client = cls(url, token)
        if save:
            write_config(client.config.url, token)
        return client

    def __repr__(self) -> str:
        return f"Client({self.config.url!r})"

    # Runs.

    def me(self) -> dict[str, Any]:
        """The user the token belongs to."""
        return dict(self.get("/api/me/"))

    def submit(
        self,
        spec: Spec,
        *,
        follow: bool = False,
        rerun: str | None = None,
        resume: str | None = None,
    ) -> Run:
        """Submit a run; with ``follow=True`` wait for its end, showing its progress.

        ``spec`` is a mapping, a YAML or JSON text, or the path of a file. Its ``sources``
        may name local folders (relative to the file, else to the working directory): each
        is packed and uploaded, and replaced by its snapshot id. ``rerun`` submits it as a
        re-run of that run; ``resume`` as a resume of that ended run, reusing every task and
        unit it finished that this spec has unchanged (docs/resume.md). A spec the server
        refuses raises ``InvalidRequest``, whose ``fields`` hold the problems by the path of
        their field; so does one whose settings a type its sources ship refuses, once the
        service learned that type (the call waits for it: ``runs.client.learning``).
        """
        name = ""
        if isinstance(spec, Mapping):
            text, base = json.dumps(spec), Path.cwd()
        elif isinstance(spec, os.PathLike) or names_a_file(spec):
            path = Path(spec).expanduser()
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as error:
                raise LocalFileError(f"cannot read {path}: {error}") from None
            base, name = path.parent, str(path)
        else:
            text, base = str(spec), Path.cwd()
        run = Run(self, self.submit_text(text, base=base, rerun=rerun, resume=resume, name=name))
        return run.wait() if follow else run

    def submit_text(
        self,
        text: str | None,
        *,
        base: Path,
        rerun: str | None = None,
        resume: str | None = None,
        report: Callable[[str], None] | None = None,
        name: str = "",
    ) -> dict[str, Any]:
        """Submit a spec's text (YAML or JSON; none to re-run ``rerun``, or resume ``resume``,
        as it was), its local sources uploaded first from ``base``; the run as the server
        returned it, once the types its sources ship are learned (``runs.client.learning``:
        settings they refuse raise ``InvalidRequest`` as a 400 does). Text that is neither,
        read from the file ``name``, is refused here, the file named where it stops reading
        (the server knows no file)."""
        endpoint = "/api/runs/" if rerun is None else f"/api/runs/{rerun}/rerun/"
        if resume is not None:
            endpoint = f"/api/runs/?{urlencode({'resume_of': resume})}"
        missing = no_run(rerun) if rerun else ""
        if text is None:
            created = dict(self.post(endpoint, missing=missing).json())
            return learned(self, created, report=report or self._say, poll_s=POLL_S)
        try:
            document = read_document(text)
        except yaml.YAMLError as error:
            if name:  # yaml's marks say '"<unicode string>", line 3' of a text
                said = str(error).replace('"<unicode string>"', f'"{name}"')
                problems = f"  spec: not valid YAML or JSON: {said}"
                fields = {"spec": [f"not valid YAML or JSON: {said}"]}
                raise InvalidRequest(f"refused:\n{problems}", fields, problems) from None
            document = None  # the server says what is wrong, by the path of the field
        body, content_type = text.encode(), "application/yaml"
        if local_sources(document):
            self.upload_sources(document, base, report=report or self._say)
            body, content_type = json.dumps(document).encode(), "application/json"
        response = self.post(
            endpoint, missing=missing, content=body, headers={"Content-Type": content_type}
        )
        return learned(self, dict(response.json()), report=report or self._say, poll_s=POLL_S)

    def upload_sources(
        self, document: dict[str, Any], base: Path, *, report: Callable[[str], None]
    ) -> None:
        """Pack and upload every local source tree of a spec; replace it by its snapshot id."""
        from runs.client.packing import pack

        for index, entry in local_sources(document):
            folder = (base / entry).resolve()
            if not folder.is_dir():
                raise LocalFileError(f"sources.{index}: {entry!r} is no folder ({folder})")
            archive = pack(folder)
            response = self.post(
                "/api/snapshots/",
                params={"name": folder.name},
                content=archive,
                headers={"Content-Type": "application/gzip"},
            )
            snapshot = response.json()
            report(
                f"uploaded {entry} ({size_text(len(archive))}) as snapshot {snapshot['id'][:12]}"
            )
            document["sources"][index] = snapshot["id"]

    def run(self, run_id: str) -> Run:
        """A run with its tasks, their plans, attempts and progress."""
        return Run(self, self.get(f"/api/runs/{run_id}/", missing=no_run(run_id)))

    def runs(
        self,
        *,
        state: str | list[str] | None = None,
        name: str | None = None,
        owner: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        live: bool | None = None,
        tag: str | list[str] | None = None,
        param: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Your latest runs (staff: anyone's with ``owner``), newest first, filtered as the
        list API filters them: states, part of the name, dates (``2025-01-31`` or a time),
        live or ended, tags (every one given), a parameter (``"T"``: any run with it;
        ``"T=1.5"``: a sweep's axis listing or spanning the value, or a setting equal to it).
        Each run is a summary: its ``tasks`` are fetched when first read."""
        params: dict[str, Any] = {
            "state": [state] if isinstance(state, str) else state,
            "name": name,
            "owner": owner,
            "created_after": created_after,
            "created_before": created_before,
            "live": None if live is None else str(live).lower(),
            "tag": [tag] if isinstance(tag, str) else tag,
            "param": param,
        }
        params = {k: v for k, v in params.items() if v is not None}
        found: list[Run] = []
        page, size = 1, max(1, min(limit, PAGE_SIZE))  # one size for all pages: their offsets
        while len(found) < limit:
            answer = self.get("/api/runs/", page=page, page_size=size, **params)
            found.extend(Run(self, item) for item in answer["results"])
            if not answer.get("next") or not answer["results"]:
                break
            page += 1
        return found[:limit]

    def cancel(self, run_id: str) -> Run:
        """Cancel a run: it is written cancelled at once, its processes stopped after."""
        response = self.post(f"/api/runs/{run_id}/cancel/", missing=no_run(run_id))
        return Run(self, response.json())

    def wait(
        self,
        run_id: str,
        *,
        progress: bool = True,
        check: bool = True,
        timeout: float | None = None,
        poll_s: float = POLL_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Run:
        """Wait for a run to end, showing a bar per task (in a notebook or a terminal).

        Returns the run as it ended; with ``check`` a run that failed or was cancelled raises
        ``RunFailed``. A server that stops answering is waited for up to a minute. Stopping
        the wait (Ctrl-C, a notebook's interrupt) leaves the run going on.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if progress:
            with shown(self.console) as show:
                item = self._wait(run_id, show, deadline, poll_s, sleep)
        else:
            item = self._wait(run_id, lambda run: None, deadline, poll_s, sleep)
        run = Run(self, item)
        if progress:
            self._say(run.summary())
        if check and run.state != "succeeded":
            raise RunFailed(run.summary(), run)
        return run

    def _wait(
        self,
        run_id: str,
        show: Callable[[dict[str, Any]], None],
        deadline: float | None,
        poll_s: float,
        sleep: Callable[[float], None],
    ) -> dict[str, Any]:
        while True:
            item = self.poll(run_id, sleep=sleep)
            show(item)
            if item["state"] in ENDED:
                return item
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {item['state']}; it goes on")
            sleep(poll_s)

    def poll(self, run_id: str, *, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
        """The run now; a server that stops answering for a while is waited for."""
        deadline = time.monotonic() + OUTAGE_S
        while True:
            try:
                return dict(self.get(f"/api/runs/{run_id}/", missing=no_run(run_id)))
            except Unavailable:
                if time.monotonic() > deadline:
                    raise
                sleep(POLL_S)

    # Tasks: logs and outputs.

    def task(self, run_id: str, task: str) -> dict[str, Any]:
        """A task with its plan, attempts and progress."""
        return dict(self.get(_task_path(run_id, task), missing=no_task(run_id, task)))

    def log_list(self, run_id: str, task: str) -> list[dict[str, Any]]:
        """The logs of a task, one per attempt of each of its processes, oldest first."""
        path = f"{_task_path(run_id, task)}logs/"
        return list(self.get(path, missing=no_task(run_id, task)))

    def log_part(
        self, run_id: str, task: str, name: str, *, tail: int | None = None, offset: int = 0
    ) -> dict[str, Any]:
        """Part of a log: its last ``tail`` lines, or what follows byte ``offset``
        (``text``, the ``offset`` to read on from, whether it is still ``running``)."""
        params = {"tail": tail} if tail is not None else {"offset": offset}
        path = f"{_task_path(run_id, task)}logs/{quote(name, safe='')}/"
        return dict(
            self.get(path, missing=f"not found: task {task!r} has no log {name!r}", **params)
        )

    def logs(self, run_id: str, task: str, *, log: str | None = None, tail: int = 200) -> str:
        """The last ``tail`` lines of each log of a task (or of the log ``log``), each under
        a ``==> name <==`` line when there are several."""
        logs = [item["name"] for item in self.log_list(run_id, task)]
        if log is not None:
            if log not in logs:
                raise NotFound(f"no log {log!r} of task {task!r} (it has {', '.join(logs)})")
            logs = [log]
        parts = []
        for name in logs:
            text = self.log_part(run_id, task, name, tail=tail)["text"]
            parts.append(f"==> {name} <==\n{text}" if len(logs) > 1 else text)
        return "".join(parts)

    def outputs(self, run_id: str, task: str) -> list[dict[str, Any]]:
        """The files of a task's ``out/``: ``path``, ``size``, ``url``."""
        path = f"{_task_path(run_id, task)}outputs/"
        return list(self.get(path, missing=no_task(run_id, task)))

    def output(self, run_id: str, task: str, path: str) -> str | bytes:
        """An output file of a task: text as ``str``, anything else (an image, an archive)
        as ``bytes``."""
        response = self._output(run_id, task, path)
        if response.headers.get("Content-Type", "").startswith("text/"):
            return response.text
        return response.content

    def download(
        self, run_id: str, task: str, path: str, to: str | os.PathLike[str] | None = None
    ) -> Path:
        """Save an output file of a task as ``to`` (a file, or a folder to put it in; by
        default the working directory); its path."""
        target = Path(to) if to is not None else Path.cwd()
        if target.is_dir():
            target = target / path.rsplit("/", 1)[-1]
        target.write_bytes(self._output(run_id, task, path).content)
        return target

    def frame(self, run_id: str, task: str, path: str, **read: Any) -> Any:
        """An output file of a task as a pandas DataFrame: CSV, TSV, JSON or JSON lines.

        ``read`` goes to pandas' reader (``pandas.read_csv`` for CSV and TSV). Needs pandas
        (``pip install pandas``): ``MissingPandas`` says so when it is missing.
        """
        pandas = frames.pandas()
        text = self._output(run_id, task, path).text
        return frames.frame(pandas, text, path, **read)

    # Results tables.

    def results(
        self,
        run: str | Run | Sequence[str | Run],
        task: str | None = None,
        *,
        filter: str | None = None,  # noqa: A002 - the API's name for it
        over: str | None = None,
    ) -> Any:
        """A task's results table as a pandas DataFrame: a row per unit, in unit order, with
        its parameters, exit code, seconds, peak memory and result fields, as the merge of a
        sweep writes ``out/results.csv``. Without ``task``, the run's one task that has a
        table. A list of runs gives their tables as one, a ``run`` column first
        (``compared_rows``), viewed as ``filter`` and ``over`` ask, its notes (rows left
        out, a run's rows partial) in ``attrs["notes"]`` and each a warning. A table of the
        units a sweep finished before it ended unmerged has ``attrs["partial"]`` true. Needs
        pandas (``pip install pandas``): ``MissingPandas`` says so."""
        pandas = frames.pandas(instead="results_csv() gives the table as CSV text")
        if isinstance(run, str | Run) and filter is None and over is None:
            text, partial = self.whole_or_partial_csv(run, task)
            frame = pandas.read_csv(io.StringIO(text))
            frame.attrs["partial"] = partial
            return frame
        runs = [run] if isinstance(run, str | Run) else list(run)
        found = self.compared_rows(runs, task, filter=filter, over=over)
        frame = pandas.DataFrame(found.rows, columns=found.columns)
        frame.attrs["notes"] = found.notes
        for note in found.notes:  # a table cut, or partial, is never so in silence
            if not (filter and note.endswith(f" rows where {filter}")):  # asked: no news
                warnings.warn(f"results: {note}", stacklevel=2)
        return frame

    def compared_rows(
        self,
        runs: Sequence[str | Run],
        task: str | None = None,
        *,
        filter: str | None = None,  # noqa: A002 - the API's name for it
        over: str | None = None,
    ) -> Rows:
        """The tables of runs as one (``GET /api/results/``): its columns, every row, a
        ``run`` column first, and its notes; one run alone is its table, viewed likewise."""
        ids = [r.id if isinstance(r, Run) else r for r in runs]
        asked = {"filter": filter, "over": over, "task": task}
        params: dict[str, Any] = {k: v for k, v in asked.items() if v}
        if len(ids) == 1:
            path = f"{_task_path(ids[0], task or self.results_task(ids[0]))}results/"
            params.pop("task", None)
        else:
            path, params["runs"] = "/api/results/", ",".join(ids)
        rows: list[dict[str, Any]] = []
        page = 1
        while True:
            answer = self.get(path, page=page, page_size=RESULT_PAGE, **params)
            rows += answer["results"]
            if not answer.get("next"):
                return Rows([c["name"] for c in answer["columns"]], rows, answer.get("notes", []))
            page += 1

    def whole_or_partial_csv(self, run: str | Run, task: str | None = None) -> tuple[str, bool]:
        """A task's table as CSV text, and whether it is partial: its ``out/results.csv``, or,
        for a task that ended before its merge (a sweep cancelled or failed), the rows of the
        units it finished (partial)."""
        run_id = run.id if isinstance(run, Run) else run
        task = task or self.results_task(run_id)
        if self._status("HEAD", f"{_task_path(run_id, task)}results.csv") == 404:
            page = f"{_task_path(run_id, task)}results/"
            if self._status("GET", page, {"page_size": 1}) == 200:
                found = self.compared_rows([run_id], task)
                return rows_csv(found.columns, found.rows), True
        return self.results_csv(run_id, task), False  # or what its answer means

    def results_csv(self, run: str | Run, task: str | None = None) -> str:
        """A task's results table as the CSV text of its ``out/results.csv``, all of it."""
        run_id = run.id if isinstance(run, Run) else run
        task = task or self.results_task(run_id)
        response = self.request(
            "GET",
            f"{_task_path(run_id, task)}results.csv",
            missing=f"not found: task {task!r} of run {run_id!r} has no results table",
        )
        return response.text

    def results_task(self, run_id: str) -> str:
        """The task of a run that has a results table; ``NotFound`` for none, ``Ambiguous``
        (naming them) for several."""
        found = [
            task["id"]
            for task in self.run(run_id).tasks
            if task["state"] in ("done", "failed", "skipped")
            and self._has_results(run_id, task["id"])
        ]
        if not found:
            raise NotFound(
                f"not found: run {run_id!r} has no task with a results table (the merge of "
                "a sweep writes one)"
            )
        if len(found) > 1:
            raise Ambiguous(f"run {run_id!r} has results in tasks {', '.join(found)}: name one")
        return str(found[0])

    def _has_results(self, run_id: str, task: str) -> bool:
        """Whether a task has a results table: a HEAD of its CSV, which sends no body; else
        a page of one row, for the rows of a task that ended before its merge."""
        for path, params in (
            (f"{_task_path(run_id, task)}results.csv", None),
            (f"{_task_path(run_id, task)}results/", {"page_size": 1}),
        ):
            method = "HEAD" if params is None else "GET"
            status = self._status(method, path, params)
            if status == 200:
                return True
            if status != 404:
                self.request(method, path, params=params)  # raises what the answer means
                return True
        return False

    def _output(self, run_id: str, task: str, path: str) -> httpx.Response:
        url = f"{_task_path(run_id, task)}outputs/{quote(path.lstrip('/'))}"
        return self.request(
            "GET", url, missing=f"not found: task {task!r} of run {run_id!r} has no output {path!r}"
        )

    def _say(self, line: str) -> None:
        self.console.print(line, markup=False)


def _task_path(run_id: str, task: str) -> str:
    return f"/api/runs/{quote(run_id, safe='')}/tasks/{quote(task, safe='')}/"
