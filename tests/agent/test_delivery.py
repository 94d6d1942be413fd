"""Assignments the long-poll brings with its news (docs/node-protocol.md, ``POST /api/v1/node/wait/``
with ``"assignments": true``): the agent acts on them at once, without a heartbeat, and applies its
answers in the order the portal read them (``as_of``), whichever of its two threads brought them."""

from collections.abc import Callable

from scheduler.agent.jobs import STOPPING
from scheduler.agent.loop import Agent
from tests.agent.conftest import running, wait_until
from tests.agent.standin_portal import StandInPortal

MakeAgent = Callable[..., Agent]


def _assignment(job_id: int, command: str = "sleep 30") -> dict:
    return {"job_id": job_id, "attempt": 1, "desired": "running", "command": command,
            "env": {"ROTA_JOB_ID": str(job_id)}, "gpus": [], "time_limit_s": None, "grace_period_s": 1,
            "kind": "training"}


def _beating_every_interval(agent):
    """The beat after the first a whole interval later, not at a random part of it (scheduler/agent/loop.py):
    a heartbeat counted here then comes only from the news."""
    agent.phase = lambda: 1.0
    return agent


def _ready(portal: StandInPortal) -> int:
    """Heartbeats so far, once the agent heartbeats and its long-poll is held (its first one answered)."""
    wait_until(lambda: portal.heartbeats)
    return len(portal.heartbeats)


def test_assignments_the_long_poll_brings_start_at_once_without_a_heartbeat(portal: StandInPortal,
                                                                            make_agent: MakeAgent) -> None:
    portal.interval_s = 5.0  # a heartbeat only every 5 s: what starts sooner came with the news
    with running(_beating_every_interval(make_agent())):
        beats = _ready(portal)
        portal.assign(1, "sleep 30")
        portal.notify()
        wait_until(lambda: portal.events_of(1, "started"), timeout=3)
        assert len(portal.heartbeats) == beats and len(portal.deliveries) == 1


def test_news_without_assignments_brings_the_heartbeat_forward(portal: StandInPortal,
                                                               make_agent: MakeAgent) -> None:
    portal.interval_s, portal.deliver = 5.0, False  # a portal that answers news alone
    with running(_beating_every_interval(make_agent())):
        beats = _ready(portal)
        portal.assign(1, "sleep 30")
        portal.notify()
        wait_until(lambda: portal.events_of(1, "started"), timeout=3)
        assert len(portal.heartbeats) == beats + 1 and portal.deliveries == []


def test_an_answer_read_before_the_one_applied_changes_nothing(make_agent: MakeAgent) -> None:
    agent = make_agent()
    assert agent.apply({"as_of": "2026-12-07T10:00:02.000000+00:00", "assignments": [_assignment(1)]})
    [key] = agent.executor.jobs
    # an answer the portal read earlier, arriving late (the other thread's): it would stop job 1
    assert not agent.apply({"as_of": "2026-12-07T10:00:01.000000+00:00", "assignments": []})
    assert agent.executor.jobs[key].state != STOPPING
    assert agent.apply({"as_of": "2026-12-07T10:00:03.000000+00:00", "assignments": []})  # a later read does
    assert agent.executor.jobs[key].state == STOPPING


def test_answers_without_a_stamp_are_applied_as_they_come(make_agent: MakeAgent) -> None:
    """An older portal stamps nothing: every answer counts, as before."""
    agent = make_agent()
    assert agent.apply({"assignments": [_assignment(1)]})
    [key] = agent.executor.jobs
    assert agent.apply({"assignments": []})
    assert agent.executor.jobs[key].state == STOPPING


def test_a_delivery_is_no_contact_with_the_portal(make_agent: MakeAgent) -> None:
    """The portal judges the node by its heartbeats alone: assignments a long-poll brings while heartbeats
    fail must not put off the stop of every job once the portal has been silent for the timeout."""
    agent = make_agent()
    agent.last_contact -= 100
    silent_since = agent.last_contact
    agent.take_news({"as_of": "2026-12-07T10:00:02.000000+00:00", "assignments": [_assignment(1)]})
    assert agent.executor.jobs and agent.last_contact == silent_since


def test_a_lost_portals_delivery_starts_nothing_and_brings_the_heartbeat_forward(make_agent: MakeAgent):
    """Once the portal is lost (every job stopped), only a heartbeat's answer brings the node back."""
    agent = make_agent()
    agent.portal_lost, agent._next_heartbeat = True, agent._clock() + 60
    agent.take_news({"as_of": "2026-12-07T10:00:02.000000+00:00", "assignments": [_assignment(1)]})
    assert not agent.executor.jobs and agent._next_heartbeat <= agent._clock()


def test_a_portal_whose_clock_stepped_back_is_followed_and_a_new_registration_starts_afresh(
        portal: StandInPortal, make_agent: MakeAgent) -> None:
    agent = make_agent()
    assert agent.apply({"as_of": "2026-12-07T10:10:00.000000+00:00", "assignments": [_assignment(1)]})
    [key] = agent.executor.jobs
    # ten minutes earlier: no answer crosses another by that much in flight; the portal's clock moved back
    assert agent.apply({"as_of": "2026-12-07T10:00:00.000000+00:00", "assignments": []})
    assert agent.executor.jobs[key].state == STOPPING
    agent.register()
    assert agent.registered and agent.apply({"as_of": "2026-12-07T09:59:59.000000+00:00", "assignments": []})
