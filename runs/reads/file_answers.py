"""A task's files as answers, the same from the API and the pages: an output file, and the
whole of a results table as a download; each with ``OUTPUT_HEADERS``.

What a task wrote is inert however a person opens it: a page of this site never (the
headers: no script, no sniffing), a spreadsheet neither: every ``.csv`` and ``.tsv`` is a
download (``attachment``) whose formulas are made inert (``inert_csv``), whatever its name
in ``out/``; the rest is plain text, an image, or bytes to save.
"""

from __future__ import annotations

from django.http import FileResponse, Http404, StreamingHttpResponse
from django.utils.http import content_disposition_header

from runs.common import store
from runs.models import Task
from runs.reads import results as tables
from runs.reads import task_files
from runs.reads.inert_csv import inert_rows

OUTPUT_HEADERS = {
    # An output is the pods' data, never a page of this site: no script, no same origin.
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
    "sandbox",
    "X-Content-Type-Options": "nosniff",
}
MEDIA = {
    tables.CSV_NAME: "text/csv; charset=utf-8",
    tables.PARQUET_NAME: "application/vnd.apache.parquet",
}
"""The type of each download of a results table."""
SHEETS = {
    ".csv": (",", "text/csv; charset=utf-8"),
    ".tsv": ("\t", "text/tab-separated-values; charset=utf-8"),
}
"""The outputs a spreadsheet opens by their name: the delimiter of their cells, their type."""


def serve_output(run_id: str, task_id: str, path: str) -> StreamingHttpResponse:
    """A file of a task's out/, or a 404 for anything that is not one; a sheet (``SHEETS``)
    as an inert download."""
    try:
        file, output = task_files.open_output(store.task_folder(run_id, task_id), path)
    except task_files.NotInOutputs:
        raise Http404(f"no output {path!r}") from None
    response: StreamingHttpResponse
    if sheet := SHEETS.get(output.suffix):
        delimiter, media = sheet
        response = StreamingHttpResponse(inert_rows(file, delimiter), content_type=media)
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=output.path.rsplit("/", 1)[-1]
        )
        for header, value in OUTPUT_HEADERS.items():
            response[header] = value
        return response
    response = FileResponse(
        file,
        content_type=task_files.content_type(output),
        as_attachment=not (output.is_image or output.is_text),
        filename=output.path.rsplit("/", 1)[-1],
    )
    for header, value in OUTPUT_HEADERS.items():
        response[header] = value
    return response


def serve_results(task: Task, name: str) -> StreamingHttpResponse:
    """The whole of a task's ``out/results.csv`` or ``out/results.parquet`` as a download,
    the CSV's formulas made inert (``inert_csv``); 404 when there is none the service reads."""
    try:
        file = tables.open_results(store.task_folder(task.run_id, task.task_id), name)
    except tables.Unreadable as error:
        raise Http404(str(error)) from None
    if file is None:
        raise Http404(f"task {task.task_id} has no out/{name}")
    response: StreamingHttpResponse
    if name == tables.CSV_NAME:
        response = StreamingHttpResponse(inert_rows(file), content_type=MEDIA[name])
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=f"{task.run_id}-{task.task_id}-{name}"
        )
    else:
        response = FileResponse(
            file,
            content_type=MEDIA[name],
            as_attachment=True,
            filename=f"{task.run_id}-{task.task_id}-{name}",
        )
    for header, value in OUTPUT_HEADERS.items():
        response[header] = value
    return response
