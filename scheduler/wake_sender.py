"""The wake-ups a transaction asks for on commit (``scheduler.wake``: the cycle's flag and message, nodes' news)
are sent by one daemon thread per process, the sender, not by the request that committed: its answer goes out
at once, and a Redis that is slow or does not answer holds up the sender only.

Wake-ups handed over while the sender is busy coalesce: the next round sends one flag push (and at most one
Celery message) for the cycle, and one pipeline for every node with news. They stay hints (DESIGN.md,
principle 2): one still waiting when its process dies (a gunicorn worker recycled, a Celery child killed) is
lost like one Redis dropped, and covered the same way, by beat's periodic cycle and the nodes' heartbeats; at
a clean exit the sender gets a second to finish (``atexit``).

A process that forks (gunicorn's workers, Celery's prefork children) starts its own sender on first use: the
parent's thread does not survive the fork. With ``ROTA_WAKE_IN_BACKGROUND`` off (the in-process tests), the
wake-ups are sent at once by the thread that committed, so a test reads Redis right after the commit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from dataclasses import dataclass, field

from django.conf import settings

from scheduler import wake

log = logging.getLogger(__name__)

EXIT_GRACE_S = 1.0  # how long a clean exit waits for the wake-ups still to send


@dataclass
class Wakeups:
    """What a round sends: whether a cycle is wanted, and which nodes' news lists get an item."""

    cycle: bool = False
    node_keys: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.cycle or bool(self.node_keys)


def deliver(wakeups: Wakeups) -> None:
    """Send ``wakeups`` now: the nodes' news in one round trip; the cycle's flag, and its Celery message when the
    flag was down (``CycleTask``). Failures are logged, never raised: the safety nets cover a lost hint."""
    if wakeups.node_keys:
        wake._push(*sorted(wakeups.node_keys), ttl_s=wake.NEWS_TTL_S)
    if wakeups.cycle and wake.cycle_request():
        from scheduler.tasks import run_cycle

        try:
            run_cycle.apply_async(kwargs={"wanted": True})  # the flag is up already: the bare message
        except Exception:  # kombu's OperationalError after its retries, or anything else: a lost hint
            log.exception("cycle wake-up message not sent; beat's periodic cycle covers it")


class Sender:
    """One process's sender: ``add`` merges wake-ups into the next round; the thread sends rounds until none is
    left, then sleeps until the next ``add``."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._changed = threading.Condition()
        self._next = Wakeups()
        self._sending = False
        self._thread = threading.Thread(target=self._run, name="rota-wake-sender", daemon=True)
        self._thread.start()

    def add(self, *, cycle: bool = False, node_keys: tuple[str, ...] = ()) -> None:
        with self._changed:
            self._next.cycle |= cycle
            self._next.node_keys.update(node_keys)
            self._changed.notify_all()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything added so far has been sent (True), or ``timeout_s`` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._next and not self._sending, timeout=timeout_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._next))
                round_, self._next, self._sending = self._next, Wakeups(), True
            try:
                deliver(round_)
            except Exception:  # never let the thread die: the next wake-up would wait for ever
                log.exception("wake-ups not sent; the periodic cycle and heartbeats cover them")
            finally:
                with self._changed:
                    self._sending = False
                    self._changed.notify_all()


_sender: Sender | None = None
_sender_made = threading.Lock()


def sender() -> Sender:
    """This process's sender, started on first use, and again in a child after a fork (the pid changed)."""
    global _sender
    current = _sender
    if current is not None and current.pid == os.getpid():
        return current
    with _sender_made:
        if _sender is None or _sender.pid != os.getpid():
            _sender = Sender()
        return _sender


def send(*, cycle: bool = False, node_keys: tuple[str, ...] = ()) -> None:
    """Send these wake-ups: by the sender (``ROTA_WAKE_IN_BACKGROUND``), else now, in this thread."""
    if settings.ROTA_WAKE_IN_BACKGROUND:
        sender().add(cycle=cycle, node_keys=node_keys)
    else:
        deliver(Wakeups(cycle=cycle, node_keys=set(node_keys)))


def flush(timeout_s: float = 5.0) -> bool:
    """Wait until this process's wake-ups so far are sent (True at once when no sender ever started here)."""
    current = _sender
    return current is None or current.pid != os.getpid() or current.flush(timeout_s)


def send_on_commit(*, cycle: bool = False, node_keys: tuple[str, ...] = ()) -> None:
    """``send`` these wake-ups once the current transaction commits (at once outside one)."""
    from django.db import transaction

    transaction.on_commit(lambda: send(cycle=cycle, node_keys=node_keys), robust=True)


atexit.register(lambda: flush(EXIT_GRACE_S))
