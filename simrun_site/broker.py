"""The embedded default's broker: kombu's SQLAlchemy transport over one SQLite file.

It replaces kombu's filesystem transport, which crashes the worker under load (a message
file read while it is written: ``JSONDecodeError``, kombu #1551). SQLite serialises the
writers of the processes of the service (web, worker, beat) and never shows half a message.
This transport polls every 0.1 s (a wake-up waits no longer), puts the file in write-ahead
mode (readers do not block the writers), makes a queue's row with one insert that another
process's insert cannot break (kombu's check-then-insert raised a unique-constraint error
when the web's first message and the worker's start made the same queue at once), and deletes
the delivered messages that kombu keeps, so the file does not grow for ever.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from typing import Any

from kombu.transport import sqlalchemy as sqla
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

OPEN_TRIES = 5
"""How often a process tries to make the tables (each race lost means another made one)."""

PRUNE_EVERY = 500
"""The deliveries between two deletions of the delivered messages."""


def _pragmas(connection: sqlite3.Connection, _record: Any) -> None:
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")


class Channel(sqla.Channel):
    """A channel that sets up the SQLite file and prunes what was delivered."""

    _deliveries = 0

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
        found = self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).first()
        if found is not None:
            return found
        table = self.queue_cls.__table__
        self.session.execute(insert(table).values(name=queue).on_conflict_do_nothing())
        self.session.commit()
        return self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).one()

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


STOPPING = threading.Event()
"""Set when the worker starts a warm shutdown (``simrun_site.celery``): stop waiting."""


class Transport(sqla.Transport):
    Channel = Channel
    polling_interval = 0.1

    def drain_events(self, connection: Any, timeout: Any = None, **kwargs: Any) -> Any:
        """kombu's, one polling interval at a time: a worker told to stop polled on for the
        rest of Celery's 2 s wait before it looked; it now leaves at the next interval."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                wait = self.polling_interval
                return super().drain_events(connection, timeout=wait)  # type: ignore[no-untyped-call]
            except TimeoutError:
                if STOPPING.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    raise
