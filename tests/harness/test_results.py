"""The results table of a split task: the CSV and its Parquet twin, column by column."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harness.results import RESULTS_CSV, RESULTS_PARQUET, write_table

COLUMNS = ["unit", "count", "energy", "label", "ok", "mixed", "nothing", "number", "last"]


def rows() -> list[list[object]]:
    """A table with a column of every kind the merge writes, and a last one after them."""
    return [
        [0, 3, 0.5, 'a,"quoted"\nline', True, 1, None, 1, 7],
        [1, 4, float("nan"), None, False, "text", None, 2.5, 8],
        [2, 5, float("inf"), "NA", True, 2.0, None, None, 9],
        [3, 6, -1e-300, "nan", False, None, None, 4, 10],
    ]


def test_the_parquet_file_holds_each_column_of_the_csv_in_one_type(tmp_path: Path) -> None:
    write_table(tmp_path, COLUMNS, rows())

    table = pq.read_table(tmp_path / RESULTS_PARQUET)

    assert table.column_names == COLUMNS
    assert [field.type for field in table.schema] == [
        pa.int64(),
        pa.int64(),
        pa.float64(),
        pa.string(),
        pa.bool_(),
        pa.string(),
        pa.null(),
        pa.float64(),
        pa.int64(),
    ]
    columns = [table.column(index).to_pylist() for index in range(len(COLUMNS))]
    energy = columns[2]
    assert energy[0] == 0.5 and math.isnan(energy[1]) and energy[2] == math.inf
    assert energy[3] == -1e-300
    assert columns[3] == ['a,"quoted"\nline', None, "NA", "nan"]
    assert columns[4] == [True, False, True, False]
    assert columns[5] == ["1", "text", "2.0", None]
    assert columns[6] == [None] * 4
    assert columns[7] == [1.0, 2.5, None, 4.0]
    assert columns[8] == [7, 8, 9, 10]
    assert (tmp_path / RESULTS_CSV).read_text().splitlines()[0] == ",".join(COLUMNS)


def test_writing_the_table_does_not_import_pandas(tmp_path: Path) -> None:
    """pandas is the largest import a merge could make; pyarrow reaches for it when it
    builds arrays from Python values."""
    probe = (
        "import sys; from pathlib import Path; from harness.results import write_table; "
        f"write_table(Path({str(tmp_path)!r}), ['unit', 'x'], [[0, 1.5], [1, None]]); "
        "print('pandas' in sys.modules)"
    )

    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.strip() == "False"
    assert pq.read_table(tmp_path / RESULTS_PARQUET).column("x").to_pylist() == [1.5, None]


def test_writing_a_table_starts_no_pool_of_threads_that_could_abort_the_exit(
    tmp_path: Path,
) -> None:
    """pyarrow's pool of a thread a core, once started, aborted a worker at its exit after a
    sound merge ("terminate called without an active exception", exit 134, once in about 40
    exits): the table is read and written without it (pyarrow's own threads of its import
    and its one for files aside)."""
    import pyarrow.csv  # noqa: F401  # the threads of pyarrow's import, before counting

    before = len(os.listdir("/proc/self/task"))
    write_table(tmp_path, ["unit", "x", "s"], [[i, i / 2, f"s{i}"] for i in range(2000)])
    assert len(os.listdir("/proc/self/task")) - before < 1 + pa.cpu_count()
