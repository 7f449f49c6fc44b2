"""Issue 45's stall: 16 requests at once on one results table of ~8 MiB (50,000 rows) beside
``/api/me/``. The table is parsed once, whoever asks first and however many ask meanwhile;
each request then costs the rows it shows, so the web's memory does not grow with the count
of requests and ``/api/me/`` answers meanwhile (its medians are printed, not held to a time:
this machine's load is not the test's)."""

from __future__ import annotations

import gc
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from django.db import connections
from rest_framework.test import APIClient

from runs.models import Run
from runs.reads import results as tables
from tests.dashboard.test_results_page import SWEEP, out_dir
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)
ROWS, FIELDS, REQUESTS = 50_000, 20, 16
PROBE_GAP_S = 0.02


def big_table(path: Path) -> int:
    """A results table of ``ROWS`` rows, ~8 MiB; its size."""
    header = ["unit", *(f"f{i}" for i in range(FIELDS)), "exit_code", "seconds", "peak_gib"]
    lines = [",".join(header)]
    lines += [
        ",".join([str(u), *(f"{(u * 7 + i) % 9973}.{i}" for i in range(FIELDS)), "0", "0.1", "0.2"])
        for u in range(ROWS)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path.stat().st_size


def timed(client: APIClient, url: str) -> float:
    started = time.perf_counter()
    assert client.get(url).status_code == 200
    return time.perf_counter() - started


def test_sixteen_requests_at_once_on_one_table_parse_it_once_and_me_answers(
    owner, owner_client, store, monkeypatch, settings
):
    settings.SIMRUN_RESULTS_MAX_BYTES = 9 * 2**20
    run: Run = ended(submitted(owner, SWEEP))
    size = big_table(out_dir(store, run) / "results.csv")
    assert 7 * 2**20 < size < settings.SIMRUN_RESULTS_MAX_BYTES
    monkeypatch.setattr(tables, "PARSED", tables.ParsedTables(32 * 2**20))
    parses = []
    parse = tables.parse

    def counted(*args, **kwargs):
        parses.append(threading.get_ident())
        return parse(*args, **kwargs)

    monkeypatch.setattr(tables, "parse", counted)
    url = f"/api/runs/{run.id}/tasks/sweep/results/"
    baseline = statistics.median(timed(owner_client, "/api/me/") for _ in range(5))

    go, answers = threading.Barrier(REQUESTS + 1), []

    def asks(number: int) -> None:
        client = APIClient()
        client.force_authenticate(owner)
        go.wait()
        try:
            query = {"sort": f"f{number % FIELDS}", "page": 1 + number % 3, "page_size": 50}
            answers.append(client.get(url, query).status_code)
        finally:
            connections.close_all()

    gc.collect()
    tracemalloc.start()
    try:
        threads = [threading.Thread(target=asks, args=(n,)) for n in range(REQUESTS)]
        for thread in threads:
            thread.start()
        go.wait()
        meanwhile = []
        while any(thread.is_alive() for thread in threads):
            meanwhile.append(timed(owner_client, "/api/me/"))
            threads[-1].join(PROBE_GAP_S)  # a probe a gap, not a spin that takes the GIL from them
        for thread in threads:
            thread.join()
        gc.collect()
        after_sixteen = tracemalloc.get_traced_memory()[0]
        for number in range(REQUESTS):  # as many again, the table parsed
            query = {"sort": f"f{number % FIELDS}", "order": "desc", "page": 2}
            assert owner_client.get(url, query).status_code == 200
        gc.collect()
        after_thirty_two = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()

    assert answers == [200] * REQUESTS
    assert len(parses) == 1, f"parsed {len(parses)} times"
    # Sixteen more requests hold no more than a sliver of what the one parse holds.
    assert after_thirty_two - after_sixteen < after_sixteen / 8, (after_sixteen, after_thirty_two)
    print(
        f"/api/me/: {baseline * 1000:.1f} ms alone, "
        f"{statistics.median(meanwhile or [0.0]) * 1000:.1f} ms (median of {len(meanwhile)}) "
        f"beside {REQUESTS} requests on a {size / 2**20:.1f} MiB table; "
        f"{after_sixteen / 2**20:.0f} MiB traced after {REQUESTS}, "
        f"{after_thirty_two / 2**20:.0f} MiB after {2 * REQUESTS}"
    )


def test_threads_sorting_one_table_at_once_each_get_their_order():
    """The table a parse made is shared by the requests of every thread: sorts on more
    columns than it keeps, asked at once, each answer its own order and never an error."""
    columns = tuple(f"c{i}" for i in range(3 * tables.ORDERS_KEPT))
    rows = [tuple(str((r * (i + 3)) % 97) for i in range(len(columns))) for r in range(200)]
    table = tables.Results(columns, rows, len(rows), True, 0)
    expected = {
        c: sorted(range(len(rows)), key=lambda r, i=i: rows[r][i]) for i, c in enumerate(columns)
    }
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a switch between almost every bytecode: the race shows
    errors: list[BaseException] = []
    go = threading.Barrier(8)

    def sorts(offset: int) -> None:
        go.wait()
        try:
            for n in range(400):
                column = columns[(offset + n) % len(columns)]
                assert table.order(column) == expected[column]
        except BaseException as error:  # noqa: BLE001  # reported below, with its thread's
            errors.append(error)

    try:
        threads = [threading.Thread(target=sorts, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(table.orders) <= tables.ORDERS_KEPT
