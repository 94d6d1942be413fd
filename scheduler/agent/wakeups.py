"""What wakes the agent's loop before its next tick: news from the portal's long-poll, and a job's end.

A self-pipe the loop sleeps on (``select``): the long-poll thread writes to it when the portal says this
node's assignments changed (and leaves what the portal delivered with the news for the loop to act on),
and, once ``catch_child_exits`` ran on the main thread, the interpreter itself
writes to it when a child (a job's shim) ends (``signal.set_wakeup_fd`` on SIGCHLD), so an exit is seen and
reported at once instead of at the next tick. Nothing here is needed for correctness: without a wake-up the
loop still passes every tick and heartbeats every interval.
"""

from __future__ import annotations

import os
import select
import signal
import threading

NEWS = b"n"  # a signal number written by the interpreter is one byte below 65, never this


class Wakeups:
    """The loop's alarm clock; ``wait`` returns True when the portal had news since the last call."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._catching = False
        self._lock = threading.Lock()
        self._delivery: dict | None = None

    def news(self, delivery: dict | None = None) -> None:
        """From any thread: the portal has news for this node, and with it ``delivery``, the assignments it
        brought (None: none, the loop heartbeats for them). The latest news is the one that counts."""
        with self._lock:
            self._delivery = delivery
        try:
            os.write(self._write, NEWS)
        except (BlockingIOError, OSError):  # full: a wake-up is pending anyway; closed: shutting down
            pass

    def delivery(self) -> dict | None:
        """The assignments the latest news brought, once (None: it brought none, or they were taken)."""
        with self._lock:
            delivery, self._delivery = self._delivery, None
        return delivery

    def catch_child_exits(self) -> bool:
        """Wake on SIGCHLD too; only the main thread may set signal handlers (elsewhere: False)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so the wake-up fd is written
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._catching = True
        return True

    def wait(self, timeout_s: float) -> bool:
        """Sleep until a wake-up or ``timeout_s``; True when one of the wake-ups was the portal's news."""
        ready, _, _ = select.select([self._read], [], [], timeout_s)
        if not ready:
            return False
        data = b""
        try:
            while chunk := os.read(self._read, 512):
                data += chunk
        except BlockingIOError:
            pass
        return NEWS in data

    def close(self) -> None:
        """Give the signal back and close the read end. The write end stays open: the long-poll thread may
        still write to it, and a closed descriptor's number could meanwhile name another file."""
        if self._catching:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self._catching = False
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
