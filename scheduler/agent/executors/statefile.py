"""The executor's state file, written in place: two slots used in turn, each a checked record.

The records change three or four times a job, and a busy node turns jobs over many times a second. Written as
a new file renamed over the old one, each save cost the agent ~0.1 ms of CPU and 0.2-2 ms of waiting: ext4
allocates and starts writing out a file renamed over another at once, and the drain's PostgreSQL writes to the
same disk (bench/README.md, "Statements bound by PostgreSQL"). Overwriting a file that exists costs ~15 us.

So a save overwrites the older of two slots (``<name>.0``, ``<name>.1``): a line ``<crc32> <seq> <length>``,
then the record. A crash while one slot is written leaves the other whole, one save older; reading takes the
whole record with the highest sequence number, so a torn one reads as if that save had not begun, as a rename
that did not happen would. A file from before the slots (``<name>.json``) is read when no slot is, and removed
once a slot holds the records. Each slot is the agent's alone (mode 0600), as the file was.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path

log = logging.getLogger(__name__)


class StateFile:
    def __init__(self, work_dir: Path, name: str) -> None:
        self.slots = (work_dir / f"{name}.0", work_dir / f"{name}.1")
        self.legacy = work_dir / f"{name}.json"  # one file replaced at each save, before the slots
        self.seq = 0  # the sequence number of the last record written or read
        self._written = False

    def write(self, text: str) -> None:
        """Keep ``text`` (one JSON object) as the newest record, in the slot that held the older one."""
        body = text.encode()
        self.seq += 1
        record = b"%08x %d %d\n" % (zlib.crc32(body), self.seq, len(body)) + body
        handle = os.open(self.slots[self.seq % 2], os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.pwrite(handle, record, 0)
            os.ftruncate(handle, len(record))
        finally:
            os.close(handle)
        if not self._written:  # the slots hold the records from now on
            self.legacy.unlink(missing_ok=True)
            self._written = True

    def read(self) -> dict | None:
        """The newest whole record (None when there is none); later writes number on from it."""
        newest: tuple[int, bytes] | None = None
        for slot in self.slots:
            try:
                record = _whole(slot.read_bytes())
            except FileNotFoundError:
                continue
            if record is None:
                log.warning("state file %s is not whole (a save the agent did not finish): reading the other",
                            slot)
            elif newest is None or record[0] > newest[0]:
                newest = record
        if newest is not None:
            self.seq = newest[0]
            return json.loads(newest[1])
        if self.legacy.exists():
            return json.loads(self.legacy.read_text())
        return None


def _whole(raw: bytes) -> tuple[int, bytes] | None:
    """``(sequence number, JSON)`` of a slot's record; None when its header, length or CRC says it is torn."""
    header, _, body = raw.partition(b"\n")
    try:
        crc, seq, length = (int(text, base) for text, base in zip(header.split(), (16, 10, 10), strict=True))
    except ValueError:
        return None
    return (seq, body) if len(body) == length and zlib.crc32(body) == crc else None
