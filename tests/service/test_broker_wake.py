"""The embedded broker's consumers wait for a write to its file, not for their next look
(simrun_site/broker.py, simrun_site/broker_wake.py)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu import Connection
from sqlalchemy import event
from sqlalchemy.engine import Engine

from simrun_site import broker, broker_wake
from tests.polling import wait_for


class Patient(broker.Transport):
    """A consumer whose safety look is far longer than any wait below."""

    polling_interval = 30.0


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.sqlite3'}"


@pytest.fixture
def looks() -> Iterator[list[float]]:
    """When a consumer looked for a message (kombu's get begins with ``BEGIN IMMEDIATE``)."""
    seen: list[float] = []

    def count(conn, cursor, statement: str, *args) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            seen.append(time.monotonic())

    event.listen(Engine, "before_cursor_execute", count)
    yield seen
    event.remove(Engine, "before_cursor_execute", count)


def send_after_a_look(url: str, looks: list[float]) -> queue.Queue[float]:
    """Send a message once the consumer looked and found none (it waits, then); the moment it
    was sent comes out of the queue returned."""
    sent: queue.Queue[float] = queue.Queue()

    def send() -> None:
        wait_for(lambda: looks, 10, "the consumer's first look")
        with Connection(url, transport=broker.Transport) as producer:
            producer.SimpleQueue("probe").put({"run": "r1"})
        sent.put(time.monotonic())

    threading.Thread(target=send, daemon=True).start()
    return sent


def test_a_message_sent_reaches_a_waiting_consumer_long_before_its_next_look(url, looks):
    with Connection(url, transport=Patient) as consumer:
        inbox = consumer.SimpleQueue("probe")
        sent = send_after_a_look(url, looks)
        message = inbox.get(timeout=Patient.polling_interval)
        received = time.monotonic()
        message.ack()
    assert message.payload == {"run": "r1"}
    assert received - sent.get(timeout=10) < Patient.polling_interval / 10


def test_an_idle_consumer_does_not_look_between_its_safety_looks(url, looks):
    window_s = 3.0
    with Connection(url, transport=broker.Transport) as consumer:
        inbox = consumer.SimpleQueue("probe")
        with pytest.raises(inbox.Empty):
            inbox.get(timeout=window_s)
    # One at the start, one a safety look, one at the end (a consumer polling every 0.1 s
    # looked some 60 times).
    assert len(looks) <= window_s / broker.Transport.polling_interval + 2


def test_a_worker_told_to_stop_stops_waiting_at_once(url, looks, monkeypatch):
    monkeypatch.setattr(broker, "STOPPING", broker_wake.Stop())
    with Connection(url, transport=Patient) as consumer:
        inbox = consumer.SimpleQueue("probe")
        threading.Thread(
            target=lambda: wait_for(lambda: looks, 10) and broker.STOPPING.set(), daemon=True
        ).start()
        started = time.monotonic()
        with pytest.raises(inbox.Empty):
            inbox.get(timeout=Patient.polling_interval)
    assert time.monotonic() - started < Patient.polling_interval / 10


def test_without_inotify_a_consumer_polls(url, looks, monkeypatch):
    monkeypatch.setattr(broker_wake, "inotify_simple", None)
    with Connection(url, transport=Patient) as consumer:
        inbox = consumer.SimpleQueue("probe")
        sent = send_after_a_look(url, looks)
        message = inbox.get(timeout=Patient.polling_interval)
        received = time.monotonic()
        message.ack()
    assert consumer.transport._writes is None
    assert received - sent.get(timeout=10) < Patient.polling_interval / 10
