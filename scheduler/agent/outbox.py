"""Sending the agent's queued job events: many in one request (``POST /api/v1/node/events/``), in order.

An end event first sends the rest of its attempt's log (a few MiB a pass, so a huge log never holds up the
heartbeats); the events before it and it then go together. A node turning over short jobs thus reports a
pass's starts and exits in one round trip. A portal without the batch endpoint gets them one by one
(``PortalClient.job_events``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import deque
from typing import TYPE_CHECKING

from scheduler.agent.client import PortalClient, PortalRejected, PortalUnavailable, RegisterRequired
from scheduler.agent.jobs import JobEvent
from scheduler.agent.logship import ship_log

if TYPE_CHECKING:
    from scheduler.agent.executors import Executor

log = logging.getLogger(__name__)
MAX_EVENTS_PER_REQUEST = 256  # the portal's limit (scheduler/services/node_events.py)
FINAL_LOG_BYTES_PER_PASS = 4 * 1024 * 1024


def flush_outbox(outbox: deque[JobEvent], client: PortalClient, executor: Executor) -> bool:
    """Send ``outbox``'s events from the front, popping each the portal answered (accepted or refused for
    good). False when the portal asks this node to register again."""
    while outbox:
        batch: list[JobEvent] = []
        log_pending = False
        try:
            for index in range(min(len(outbox), MAX_EVENTS_PER_REQUEST)):
                if outbox[index].log_path and not _ship_final_log(outbox, index, client, executor):
                    log_pending = True  # more log than one pass sends: the rest (and the event) next time
                    break
                batch.append(outbox[index])
            if not batch:
                return True
            results = client.job_events([(event.job_id, event.body()) for event in batch])
        except PortalUnavailable as error:
            log.debug("%d job events wait: %s", len(outbox), error)
            return True
        except RegisterRequired:
            return False
        for event, result in zip(batch, results, strict=True):
            if "status" in result:
                log.warning("the portal refused the %s event of job %s: %s", event.type, event.job_id,
                            result.get("detail"))
            outbox.popleft()
        executor.acknowledge(*batch)
        if log_pending:
            return True
    return True


def _ship_final_log(outbox: deque[JobEvent], index: int, client: PortalClient, executor: Executor) -> bool:
    """Send the rest of an ended attempt's log, a few MiB per pass; True once all of it is sent."""

    def remember(offset: int) -> None:
        outbox[index] = dataclasses.replace(outbox[index], log_offset=offset)
        executor.update_unreported(outbox[index])

    event = outbox[index]
    path = event.log_path or ""
    for _ in range(2):  # a second pass from 0 when the portal holds less than we thought
        try:
            offset = ship_log(client, event.job_id, event.attempt, path, outbox[index].log_offset,
                              max_bytes=FINAL_LOG_BYTES_PER_PASS, final=True, progress=remember)
            return not os.path.exists(path) or offset >= os.path.getsize(path)
        except PortalRejected as error:
            log.warning("the portal refused the log of job %s: %s", event.job_id, error)
            if not (error.status == 409 and error.field == "offset"):
                return True
            remember(0)
    return True
