"""A stop set by a signal handler while the main thread waits on it (``SignalStop``): the wait
ends, however the signals fall. A ``threading.Event`` set there waits for ever when a signal
lands while the main thread holds the event's lock inside its own ``wait`` (how ``simrun
serve`` once hung on a SIGTERM, with its children running)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SIGNALLED = textwrap.dedent(
    """
    import os, signal, time
    from harness.lifecycle import SignalStop

    stop = SignalStop()
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    sender = os.fork()
    if sender == 0:  # signals, each while the main thread waits, sets and clears the stop
        for _ in range(20000):
            os.kill(os.getppid(), signal.SIGUSR1)
            time.sleep(0.0002)
        os._exit(0)
    waits = 0
    while not os.waitpid(sender, os.WNOHANG)[0]:
        stop.wait(0.0005)
        stop.clear()
        waits += 1
    stop.set()
    print("ended", waits, stop.wait(), stop.wait(0))
    """
)


def test_a_flood_of_signals_setting_the_stop_never_hangs_its_waits() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    word, waits, waited, at_once = done.stdout.split()
    assert (word, waited, at_once) == ("ended", "True", "True") and int(waits) > 0


def test_a_wait_without_a_stop_ends_at_its_timeout_false() -> None:
    from harness.lifecycle import SignalStop

    stop = SignalStop()

    assert stop.wait(0.01) is False and not stop.is_set()
    stop.set()
    assert stop.wait(0.01) is True and stop.is_set()
