"""The embedded default's broker: kombu's SQLAlchemy transport over one SQLite file.

It replaces kombu's filesystem transport, which crashes the worker under load (a message
file read while it is written: ``JSONDecodeError``, kombu #1551). SQLite serialises the
writers of the processes of the service (web, worker, beat) and never shows half a message.
A consumer waits for a write to the file instead of polling it (``simrun_site/broker_wake.py``:
inotify on Linux), so a message sent reaches a waiting worker at once and an idle service
reads nothing; it still looks every ``polling_interval`` (a write the watch missed waits no
longer), and every ``BLIND_POLL_S`` where it cannot watch. This transport puts the file in
write-ahead mode (readers do not block the writers), makes a queue's row with one insert that
another process's insert cannot break (kombu's check-then-insert raised a unique-constraint
error when the web's first message and the worker's start made the same queue at once), and
deletes the delivered messages that kombu keeps, so the file does not grow for ever.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

from kombu.transport import sqlalchemy as sqla
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from simrun_site import broker_wake

OPEN_TRIES = 5
"""How often a process tries to make the tables (each race lost means another made one)."""

PRUNE_EVERY = 500
"""The deliveries between two deletions of the delivered messages."""

BLIND_POLL_S = 0.1
"""How often a consumer looks where it cannot watch the file, or while its worker holds all
the messages it may (a worker's ack writes nothing to the file: no write would wake it)."""


def _pragmas(connection: sqlite3.Connection, _record: Any) -> None:
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")


class Channel(sqla.Channel):
    """A channel that sets up the SQLite file and prunes what was delivered."""

    _deliveries = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._rows: dict[str, Any] = {}
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]

    @property
    def session(self) -> Any:
        """kombu's session, but what it loaded outlives a commit, so a queue's row (never
        changed nor deleted) is read once a channel, not at each look for a message."""
        if self._session is None:
            _, sessions = self._open()
            self._session = sessions(expire_on_commit=False)
        return self._session

    def _open(self) -> Any:
        """The engine and its sessions; tried again while other processes make the tables
        between this one's look and its create (SQLite: "table kombu_queue already exists")."""
        for _ in range(OPEN_TRIES - 1):
            with contextlib.suppress(OperationalError):
                return super()._open()  # type: ignore[no-untyped-call]
        return super()._open()  # type: ignore[no-untyped-call]

    def _engine_from_config(self) -> Engine:
        engine: Engine = super()._engine_from_config()  # type: ignore[no-untyped-call]
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _pragmas)
        return engine

    def _get_or_create(self, queue: str) -> Any:
        """The queue's row, inserted unless some process has it already."""
        if (known := self._rows.get(queue)) is not None:
            return known
        found = self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).first()
        if found is None:
            table = self.queue_cls.__table__
            self.session.execute(insert(table).values(name=queue).on_conflict_do_nothing())
            self.session.commit()
            found = self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).one()
        self._rows[queue] = found
        return found

    def _get(self, queue: str, timeout: Any = None) -> Any:
        payload = super()._get(queue)  # type: ignore[no-untyped-call]
        self._deliveries += 1
        if self._deliveries % PRUNE_EVERY == 0:
            self._prune()
        return payload

    def _prune(self) -> None:
        """Delete the messages delivered (kombu keeps them, marked invisible)."""
        self.session.query(self.message_cls).filter(self.message_cls.visible.is_(False)).delete(
            synchronize_session=False
        )
        self.session.commit()


STOPPING = broker_wake.Stop()
"""Set when the worker starts a warm shutdown (``simrun_site.celery``): stop waiting."""


class Transport(sqla.Transport):
    Channel = Channel
    polling_interval = 2.0
    """The longest a consumer that watches the file waits without looking."""

    _writes: broker_wake.Writes | None = None
    _watched = False

    def drain_events(self, connection: Any, timeout: Any = None, **kwargs: Any) -> Any:
        """Deliver a message, looking again whenever the file is written, until ``timeout``
        or the worker is told to stop (``STOPPING``), which ends the wait at once.

        The writes seen are forgotten before each look, so none is lost between a look and
        the wait. A look woken by a commit in progress sees it: kombu's get on SQLite begins
        with ``BEGIN IMMEDIATE``, which waits for the writer's lock until its commit ends.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        writes = self._watch()
        while True:
            if writes is not None:
                writes.clear()
            with contextlib.suppress(TimeoutError):
                return super().drain_events(connection, timeout=0)  # type: ignore[no-untyped-call]
            left = math.inf if deadline is None else deadline - time.monotonic()
            if STOPPING.is_set() or left <= 0:
                raise TimeoutError("no message")
            blind = writes is None or not all(c.qos.can_consume() for c in self.channels)
            wait = min(left, BLIND_POLL_S if blind else self.polling_interval)
            if writes is None:
                STOPPING.wait(wait)
            else:
                writes.wait(wait, STOPPING)

    def _watch(self) -> broker_wake.Writes | None:
        """The writes to the broker's file, watched from the first wait on; None where they
        cannot be (not SQLite, not Linux)."""
        if not self._watched:
            self._watched = True
            assert self.client is not None  # kombu's Connection makes its transport with itself
            url = make_url(self.client.hostname)
            if url.get_backend_name() == "sqlite" and url.database:
                self._writes = broker_wake.watch(Path(url.database).absolute())
        return self._writes

    def close_connection(self, connection: Any) -> None:
        if self._writes is not None:
            self._writes.close()
            self._writes = None
        self._watched = False
        super().close_connection(connection)  # type: ignore[no-untyped-call]
