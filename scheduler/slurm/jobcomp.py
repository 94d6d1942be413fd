"""Slurm's record of finished jobs: the job completion log (``JobCompType=jobcomp/filetxt``, the file named by
``JobCompLoc``), one line per job that ended, kept after ``squeue`` has forgotten the job (``MinJobAge``).

The bridge reads it for two things (``docs/slurm.md``):

- **never submit twice**: an attempt that ended while the bridge was down, longer ago than ``MinJobAge``, is no
  longer in ``squeue``; its line here (named ``rota-<job id>-<attempt>``) says it ran and how it ended;
- **accounting**: each finished attempt's start, end and elapsed time as Slurm recorded them, which the portal
  compares with Rota's ledger.

Without slurmdbd Slurm writes no GPU count here (``AccountingStorageTRES=gres/gpu`` needs slurmdbd); a line
that has one (``Tres=…,gres/gpu=N``) gives it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from scheduler.slurm.jobs import SlurmJob

log = logging.getLogger(__name__)
_NAME = re.compile(r"^rota-(\d+)-(\d+)$")
_KEY = re.compile(r"(?:^| )([A-Za-z]+)=")
_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)")


@dataclass(frozen=True)
class Completed:
    """One of Rota's attempts as Slurm's job completion log recorded it."""

    job: SlurmJob  # its end, as ``squeue`` would have shown it
    started_at: datetime | None  # aware (UTC); None when it never started
    ended_at: datetime | None
    gpus: int | None  # None: Slurm recorded no GPU count (no slurmdbd)

    @property
    def elapsed_s(self) -> float:
        if self.started_at is None or self.ended_at is None:
            return 0.0
        return max(0.0, (self.ended_at - self.started_at).total_seconds())


def fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of a line; a value runs to the next `` Key=`` (a job name may hold spaces)."""
    marks = list(_KEY.finditer(line))
    out = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        out[mark.group(1)] = line[mark.end():following.start() if following else len(line)].strip()
    return out


def _when(text: str) -> datetime | None:
    """Slurm writes local time without a zone (``2026-12-06T02:33:19``); ``Unknown`` or ``None`` is none."""
    try:
        return datetime.fromisoformat(text).astimezone().astimezone(UTC)
    except ValueError:
        return None


def _status(exit_code: str) -> int:
    """``ExitCode=3:0`` (code:signal) as a wait status."""
    code, _, signal = exit_code.partition(":")
    try:
        return (int(signal) & 0x7F) or ((int(code) & 0xFF) << 8)
    except ValueError:
        return 0


def parse_line(line: str) -> Completed | None:
    """One line of the file; None for a job that is not one of Rota's attempts (or a line cut short)."""
    raw = fields(line)
    match = _NAME.match(raw.get("Name", ""))
    if not match or not raw.get("JobId", "").isdigit() or "ExitCode" not in raw:
        return None
    gpus = _GPUS.search(raw.get("Tres", ""))
    job = SlurmJob(slurm_id=int(raw["JobId"]), key=(int(match[1]), int(match[2])), state=raw.get("JobState", ""),
                   node=raw.get("NodeList", ""), required_node="", status=_status(raw["ExitCode"]), reason="")
    return Completed(job=job, started_at=_when(raw.get("StartTime", "")), ended_at=_when(raw.get("EndTime", "")),
                     gpus=int(gpus[1]) if gpus else None)


class JobCompLog:
    """Follows the file: the first ``read`` reads it whole (what ended while the bridge was down), later ones
    only what was appended; a file replaced or cut (log rotation) is read again from its start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.inode: int | None = None
        self._partial = b""

    def read(self) -> list[Completed]:
        try:
            with open(self.path, "rb") as handle:
                info = os.fstat(handle.fileno())
                if info.st_ino != self.inode or info.st_size < self.offset:
                    self.inode, self.offset, self._partial = info.st_ino, 0, b""
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []  # Slurm writes it at the first job's end
        except OSError as error:
            log.warning("cannot read Slurm's job completion log %s: %s", self.path, error)
            return []
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # a line not finished yet
        return [done for line in lines if (done := parse_line(line.decode(errors="replace")))]
