"""``csv-stats``: a plugin type; count, mean, min and max of every numeric CSV column.

Run as ``simrun-exec python -m harness.examples.csv_stats --port table``: it reads the CSV
files of its input port ``table`` (staged by simrun-exec into ``inputs/table``) and writes
``stats.json`` into ``SIMRUN_OUT``. A split task's results table (``results.csv`` at the top
of its outputs: one row per unit) holds the rows of the task's other CSVs again (``ising``
writes ``ising.csv`` too, a command sweep each unit's own file): where it is, it is read
alone, so no row counts twice; else every CSV of the port.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from harness.config import OUT_ENV, paths_from_env
from harness.execute import INPUTS_DIR
from harness.files import write_atomic
from harness.results import RESULTS_CSV
from harness.tasktypes import TaskType


class CsvStatsSettings(BaseModel):
    """``port``: the input port whose CSV files are read."""

    port: str = Field(default="table", pattern=r"^[a-z][a-z0-9_-]*$")


def command(settings: CsvStatsSettings) -> list[str]:
    return ["python", "-m", "harness.examples.csv_stats", "--port", settings.port]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def column_stats(files: list[Path]) -> dict[str, dict[str, float]]:
    """Count, mean, min and max of each column whose every value is a number."""
    values: dict[str, list[float]] = {}
    non_numeric: set[str] = set()
    for path in files:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                for column, text in row.items():
                    if column is None or column in non_numeric:
                        continue
                    number = _number(text or "")
                    if number is None:
                        non_numeric.add(column)
                        values.pop(column, None)
                    else:
                        values.setdefault(column, []).append(number)
    return {
        column: {
            "count": len(numbers),
            "mean": sum(numbers) / len(numbers),
            "min": min(numbers),
            "max": max(numbers),
        }
        for column, numbers in values.items()
        if numbers
    }


def input_dir(port: str) -> Path:
    """The directory of an input port: staged by simrun-exec into ``inputs/<port>`` below the
    working directory, else the port's directory in the store (``SIMRUN_INPUTS``)."""
    staged = Path.cwd() / INPUTS_DIR / port
    if staged.is_dir():
        return staged
    inputs = paths_from_env(os.environ).inputs
    if port not in inputs:
        raise SystemExit(f"csv-stats: no input port {port!r} (staged or in SIMRUN_INPUTS)")
    return inputs[port]


def out_dir() -> Path:
    """``SIMRUN_OUT``, set by simrun-exec; else the task directory's ``out/``."""
    if os.environ.get(OUT_ENV):
        return Path(os.environ[OUT_ENV])
    return paths_from_env(os.environ).out


def tables(folder: Path) -> list[Path]:
    """The CSV files of a port to read: its results table alone where it has one (every row
    once), else all of them."""
    if (folder / RESULTS_CSV).is_file():
        return [folder / RESULTS_CSV]
    return sorted(p for p in folder.rglob("*.csv") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    port = args[args.index("--port") + 1] if "--port" in args else "table"
    files = tables(input_dir(port))
    out = out_dir()
    out.mkdir(parents=True, exist_ok=True)
    stats = {"files": [p.name for p in files], "columns": column_stats(files)}
    write_atomic(out / "stats.json", json.dumps(stats, indent=2))
    print(f"csv-stats: {len(files)} files, {len(stats['columns'])} numeric columns")
    return 0


TASK_TYPE = TaskType(
    name="csv-stats",
    settings=CsvStatsSettings,
    command=command,
    base_gb=0.1,
    per_worker_gb=0.2,
    description="count, mean, min and max of each numeric column of the input CSV files",
)

if __name__ == "__main__":
    raise SystemExit(main())
