"""The embedded default's broker: kombu's SQLAlchemy transport over one SQLite file.

It replaces kombu's filesystem transport, which crashes the worker under load (a message
file read while it is written: ``JSONDecodeError``, kombu #1551). SQLite serialises the
writers of the processes of the service (web, worker, beat) and never shows half a message.
This transport polls every 0.1 s (a wake-up waits no longer), puts the file in write-ahead
mode (readers do not block the writers), and deletes the delivered
messages that kombu keeps, so the file does not grow for ever.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from kombu.transport import sqlalchemy as sqla
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

PRUNE_EVERY = 500
"""The deliveries between two deletions of the delivered messages."""


def _pragmas(connection: sqlite3.Connection, _record: Any) -> None:
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")


class Channel(sqla.Channel):
    """A channel that sets up the SQLite file and prunes what was delivered."""

    _deliveries = 0

    def _open(self) -> Any:
        """The engine and its sessions; a second try when another process made the tables
        between this one's look and its create (SQLite: "table kombu_queue already exists")."""
        try:
            return super()._open()  # type: ignore[no-untyped-call]
        except OperationalError:
            return super()._open()  # type: ignore[no-untyped-call]

    def _engine_from_config(self) -> Engine:
        engine: Engine = super()._engine_from_config()  # type: ignore[no-untyped-call]
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _pragmas)
        return engine

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


class Transport(sqla.Transport):
    Channel = Channel
    polling_interval = 0.1
