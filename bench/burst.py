"""The client side of a submit burst, shared by both columns of ``bench/peer.py`` (Rota's HTTP submits and
Slurm's ``sbatch`` calls): ``clients`` concurrent loops, each making its share of the calls one after the
other, every call timed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def burst(clients: int, total: int, make_client: Callable[[int], Callable[[int], object]]) -> tuple[float, list[float]]:
    """Run ``total // clients`` calls in each of ``clients`` threads: ``make_client(c)`` (in client ``c``'s
    thread, untimed: a session, say) returns the call, given the call's number within its client. The seconds
    from the first thread's start to the last one's end, and each call's seconds."""
    latencies: list[float] = []  # list.append is atomic: the threads share it without a lock
    failures: list[BaseException] = []

    def loop(c: int) -> None:
        try:
            call = make_client(c)
            for i in range(total // clients):
                began = time.perf_counter()
                call(i)
                latencies.append(time.perf_counter() - began)
        except BaseException as exc:  # re-raised below: a failed client must not pass for a fast one
            failures.append(exc)

    threads = [threading.Thread(target=loop, args=(c,)) for c in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    return elapsed, latencies
