"""Sending a job's log file to the portal in byte-offset chunks.

The portal stores chunks by the byte offset of their data in the attempt's log and ignores a chunk it
already holds, so a resend after a failure is harmless. Chunks never split a UTF-8 character, and each
byte that is not valid UTF-8 becomes one "?", so the text the portal stores has exactly as many UTF-8
bytes as the file: the agent's offsets and the portal's stored length never drift apart.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from scheduler.agent.client import PortalClient

CHUNK_BYTES = 64 * 1024
_ERRORS = "rota-one-qmark-per-byte"
codecs.register_error(_ERRORS, lambda error: ("?" * (error.end - error.start), error.end))


def _complete_prefix(raw: bytes) -> int:
    """Length of ``raw`` without a UTF-8 sequence cut at its end."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte & 0b1100_0000 == 0b1000_0000:
            continue  # continuation byte: keep looking for the lead byte
        if byte & 0b1000_0000 == 0:
            return len(raw)  # ASCII
        needed = 2 if byte >= 0xC0 and byte < 0xE0 else 3 if byte < 0xF0 else 4
        return len(raw) if back >= needed else len(raw) - back
    return len(raw)


def read_chunk(path: str, offset: int, limit: int = CHUNK_BYTES, *, final: bool = False) -> tuple[str, int]:
    """Text of the log from byte ``offset`` (at most ``limit`` bytes) and how many bytes it covers.

    Unless ``final``, a trailing incomplete character is left for the next read.
    """
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            raw = handle.read(limit)
    except OSError:
        return "", 0
    size = len(raw) if final else _complete_prefix(raw)
    return raw[:size].decode("utf-8", _ERRORS), size


def ship_log(
    client: PortalClient,
    job_id: int,
    attempt: int,
    path: str,
    offset: int,
    *,
    max_bytes: int = 16 * CHUNK_BYTES,
    final: bool = False,
    progress: Callable[[int], None] = lambda offset: None,
) -> int:
    """Post new log bytes from ``offset`` on (up to ``max_bytes``); returns the new acknowledged offset.

    ``progress`` is told the offset after every acknowledged chunk, so nothing is lost when a later
    chunk fails: portal errors propagate to the caller.
    """
    sent = 0
    while sent < max_bytes:
        text, size = read_chunk(path, offset, min(CHUNK_BYTES, max_bytes - sent), final=final)
        if size == 0:
            break
        client.job_log(job_id, {"attempt": attempt, "offset": offset, "data": text})
        offset += size
        sent += size
        progress(offset)
    return offset
