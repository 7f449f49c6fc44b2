"""The service's log: key=value lines with the run, a line per reconcile that changed something,
chatty libraries' warnings once."""

from __future__ import annotations

import io
import logging
from logging.config import dictConfig

import pytest
from django.conf import settings

from runs import tasks
from runs.common.logfmt import KeyValueFormatter, Once
from runs.control import submitting
from tests.factories import submitted


def line_of(logger: str, message: str, *args, **extra) -> str:
    record = logging.getLogger(logger).makeRecord(
        logger, logging.WARNING, __file__, 1, message, args, None, extra=extra
    )
    return KeyValueFormatter().format(record)


def test_a_line_is_key_value_with_the_run_named_in_its_message():
    line = line_of("runs.control.backoff", "reconciling run %s failed; it is pushed aside", "r1x")
    assert " level=WARNING logger=runs.control.backoff run=r1x " in line
    assert line.endswith('msg="reconciling run r1x failed; it is pushed aside"')
    assert line.startswith("time=") and line.split()[0].endswith("Z")


def test_the_run_and_other_pairs_come_from_extra():
    line = line_of("runs.tasks", "reconciled %d%% of %s", 50, "them", run="abc", changed=2)
    assert "run=abc" in line and 'msg="reconciled 50% of them"' in line
    assert line.endswith(" changed=2")


def test_a_message_without_a_run_has_no_run_pair():
    assert "run=" not in line_of("kombu", "connection to %s lost", "broker")


def test_a_kombu_warning_is_shown_once_and_other_lines_each_time():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(Once())
    kombu, ours = logging.getLogger("kombu.transport.test"), logging.getLogger("runs.test")
    for logger in (kombu, ours):
        logger.addHandler(handler)
        logger.propagate = False
    try:
        for _ in range(3):
            kombu.warning("restoring %d unacknowledged message(s)", 2)
            ours.warning("run %s changed", "x")
        kombu.warning("restoring %d unacknowledged message(s)", 5)
    finally:
        for logger in (kombu, ours):
            logger.removeHandler(handler)
            logger.propagate = True
    lines = stream.getvalue().splitlines()
    assert lines.count("restoring 2 unacknowledged message(s)") == 1
    assert lines.count("restoring 5 unacknowledged message(s)") == 1
    assert lines.count("run x changed") == 3


def test_celery_says_nothing_per_task_received_or_done():
    dictConfig(settings.LOGGING)
    for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    assert logging.getLogger("runs.tasks").isEnabledFor(logging.INFO)


@pytest.mark.django_db
def test_a_reconcile_logs_at_info_only_when_it_changed_a_run(owner, backend, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG, logger="runs.tasks")
    tasks.reconcile()
    (idle,) = [r for r in caplog.records if r.getMessage() == "reconciled"]
    assert idle.levelno == logging.DEBUG
    caplog.clear()
    run = submitted(owner)
    submitting.submit(run.id, backend=backend)
    run.refresh_from_db()
    backend.finish(run.workflow, "Succeeded")
    tasks.reconcile()
    (busy,) = [r for r in caplog.records if r.getMessage() == "reconciled"]
    assert busy.levelno == logging.INFO and busy.changed == 1
