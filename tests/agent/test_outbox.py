"""Job events go to the portal many per request (``POST /api/v1/node/events/``), in order; a portal without
that endpoint gets them one by one; a refused event is dropped alone."""

import time
from collections.abc import Callable

import pytest

from scheduler.agent import procs
from scheduler.agent.loop import Agent
from tests.agent.conftest import wait_until
from tests.agent.standin_portal import StandInPortal

MakeAgent = Callable[..., Agent]
NODE = {"node": "test-node", "cpus": 8, "memory_mb": 64000, "gpus": [{"model": "a100-40gb", "count": 4}]}


def _run_three(portal: StandInPortal, agent: Agent) -> None:
    """One pass starts three jobs and sends their starts; once all three ended, one flush sends their ends."""
    go = agent.config.work_dir / "go"  # they end after the pass (the test below: those that end during it)
    for job_id in (1, 2, 3):
        portal.assign(job_id, f"echo job {job_id}; while [ ! -e {go} ]; do sleep 0.01; done")
    assert agent.register()
    agent.step()  # heartbeat: the three start; their started events go
    assert not agent.outbox
    go.touch()

    def ended() -> bool:
        agent.outbox.extend(agent.executor.poll())
        return len(agent.outbox) == 3

    wait_until(ended)
    agent.flush_outbox()
    assert not agent.outbox and not agent.executor.unreported


@pytest.mark.parametrize("batch", [True, False])
def test_a_passes_starts_and_ends_go_together_or_one_by_one_to_an_older_portal(
        portal: StandInPortal, make_agent: MakeAgent, batch: bool) -> None:
    portal.batch_events = batch
    _run_three(portal, make_agent(NODE))
    assert portal.batches == ([3, 3] if batch else [])
    for job_id in (1, 2, 3):
        assert [e["type"] for e in portal.events_of(job_id)] == ["started", "exited"]
        assert portal.log_text(job_id) == f"job {job_id}\n"  # the log went before its end event


def test_an_event_refused_in_a_batch_is_dropped_alone(portal: StandInPortal, make_agent: MakeAgent) -> None:
    portal.refuse_jobs[2] = (409, {"detail": "attempt 1 of job 2 is over", "field": "attempt"})
    _run_three(portal, make_agent(NODE))
    assert [body["type"] for _, kind, body in portal.refused if kind == "events"] == ["started", "exited"]
    assert [e["type"] for e in portal.events_of(1)] == ["started", "exited"]
    assert [e["type"] for e in portal.events_of(3)] == ["started", "exited"]
    assert portal.events_of(2) == []


def test_an_end_that_comes_while_the_pass_starts_jobs_goes_with_their_starts(
        portal: StandInPortal, make_agent: MakeAgent) -> None:
    """A node turning over short jobs: a job that ended before the pass sent its start is reported in the same
    request as its start, not one round trip later."""
    portal.assign(1, "true")
    agent = make_agent(NODE)
    assert agent.register()
    ship_logs = agent.ship_logs

    def ship_logs_once_it_ended() -> None:  # the pass's step between its starts and its flush, after the end
        wait_until(lambda: procs.child_exited(agent.executor.jobs["1:1"].pid))
        ship_logs()

    agent.ship_logs = ship_logs_once_it_ended  # type: ignore[method-assign]
    agent.step()
    assert portal.batches == [2]
    assert [e["type"] for e in portal.events_of(1)] == ["started", "exited"]
    assert not agent.outbox and not agent.executor.jobs


def test_a_busy_portals_429_keeps_the_events_and_the_next_send_waits_its_retry_after(
        portal: StandInPortal, make_agent: MakeAgent) -> None:
    """The portal's bulk lane is full (portal/priority.py): its 429 names when to come back. The events stay
    queued, in order; passes before then send nothing (no hot loop); the first pass after sends them."""
    portal.busy = [1]
    agent = make_agent(NODE)
    for job_id in (1, 2):
        portal.assign(job_id, "sleep 30")
    assert agent.register()
    agent.step()  # heartbeat: both start; their started events are refused with 429, Retry-After: 1
    assert [(e.job_id, e.type) for e in agent.outbox] == [(1, "started"), (2, "started")]
    assert len(portal.batch_posts) == 1 and portal.events == []
    refused_at = portal.batch_posts[0]
    for _ in range(5):
        agent.flush_outbox()
        assert len(agent.outbox) == 2 and len(portal.batch_posts) == 1  # nothing sent yet
        time.sleep(0.1)

    def sent() -> bool:
        agent.flush_outbox()
        return not agent.outbox

    wait_until(sent, timeout=5)
    assert len(portal.batch_posts) == 2 and portal.batch_posts[1] - refused_at >= 1.0
    assert [(job_id, body["type"]) for job_id, body in portal.events] == [(1, "started"), (2, "started")]
