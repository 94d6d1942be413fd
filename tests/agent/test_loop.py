"""The reconcile loop against a stand-in portal: register, heartbeat, start, stop, re-register, loss."""

import json
import time
from collections.abc import Callable

import pytest

from scheduler.agent.jobs import Assignment, JobEvent
from scheduler.agent.loop import Agent
from tests.agent.conftest import SMALL_NODE, running, wait_until
from tests.agent.standin_portal import StandInPortal

MakeAgent = Callable[..., Agent]


def test_it_registers_its_gpus_then_heartbeats_with_an_increasing_seq(
    portal: StandInPortal, make_agent: MakeAgent
):
    agent = make_agent()
    with running(agent):
        wait_until(lambda: len(portal.heartbeats) >= 3)
    [registration] = portal.registrations[:1]
    assert registration["hostname"] == "test-node" and registration["gpu_backend"] == "fake"
    assert [(g["index"], g["model"], g["memory_mb"]) for g in registration["gpus"]] == [
        (0, "a100-40gb", 40960),
        (1, "a100-40gb", 40960),
    ]
    seqs = [h["seq"] for h in portal.heartbeats]
    assert seqs == sorted(set(seqs))
    beat = portal.heartbeats[0]
    assert [g["healthy"] for g in beat["gpus"]] == [True, True]
    assert {row["uuid"] for row in beat["telemetry"]} == {g["uuid"] for g in registration["gpus"]}


def test_it_starts_a_missing_job_and_reports_its_end_after_its_log(
    portal: StandInPortal, make_agent: MakeAgent
):
    portal.assign(1, "echo hello; exit 0")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(1, "exited"))
    started, exited = portal.events_of(1)
    assert started["type"] == "started" and started["pid"] > 0
    assert (exited["exit_code"], exited["signal"], exited["attempt"]) == (0, None, 1)
    assert portal.log_text(1) == "hello\n"


def test_it_never_starts_an_attempt_that_already_ended(portal: StandInPortal, make_agent: MakeAgent) -> None:
    portal.assign(1, "exit 0")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(1, "exited"))
        seen = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) >= seen + 3)
    assert len(portal.events_of(1, "started")) == 1


def test_it_streams_the_log_of_a_running_job(portal: StandInPortal, make_agent: MakeAgent) -> None:
    portal.assign(1, "echo one; sleep 30")
    with running(make_agent()):
        wait_until(lambda: portal.log_text(1) == "one\n")
        assert portal.events_of(1, "exited") == []


def test_it_stops_a_job_the_portal_no_longer_lists(portal: StandInPortal, make_agent: MakeAgent) -> None:
    portal.assign(1, "sleep 30")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(1, "started"))
        portal.unassign(1)
        [exited] = wait_until(lambda: portal.events_of(1, "exited"))
        assert exited["signal"] == 15
        wait_until(lambda: portal.heartbeats[-1]["running"] == [])


def test_it_stops_a_job_listed_as_desired_stopped(portal: StandInPortal, make_agent: MakeAgent) -> None:
    portal.assign(1, "sleep 30")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(1, "started"))
        wait_until(
            lambda: portal.heartbeats[-1]["running"][:1] and portal.heartbeats[-1]["running"][0]["pid"]
        )
        portal.assign(1, "sleep 30", desired="stopped")
        [exited] = wait_until(lambda: portal.events_of(1, "exited"))
    assert (exited["signal"], exited["message"]) == (15, "stopped on request")


def test_it_registers_again_when_the_portal_asks(portal: StandInPortal, make_agent: MakeAgent) -> None:
    with running(make_agent()):
        wait_until(lambda: portal.heartbeats)
        portal.require_register = True
        wait_until(lambda: len(portal.registrations) == 2)
        beats = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) > beats)


def test_a_rotated_token_is_read_again_from_the_token_file_and_no_job_is_stopped(
    portal: StandInPortal, make_agent: MakeAgent, tmp_path
) -> None:
    token_file = tmp_path / "node.token"
    token_file.write_text("node-secret\n")
    portal.assign(1, "sleep 30")
    agent = make_agent(token_file=token_file)
    with running(agent):
        wait_until(lambda: portal.events_of(1, "started"))
        token_file.write_text("rn_rotated\n")  # what node_token rotate --output writes on the node
        portal.token = "rn_rotated"
        beats = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) > beats + 2)
        assert agent.executor.jobs and not portal.events_of(1, "stopped")
    assert len(portal.registrations) == 1, "no new registration was needed"


def test_it_stops_all_its_jobs_when_the_portal_is_lost_for_the_timeout(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    portal.timeout_s = 0.6
    portal.assign(1, "sleep 30")
    portal.assign(2, "sleep 30")
    agent = make_agent()
    with running(agent):
        wait_until(lambda: len(portal.events_of(1, "started") + portal.events_of(2, "started")) == 2)
        portal.down = True
        wait_until(lambda: not agent.executor.jobs, timeout=4)
        portal.down = False
        wait_until(lambda: len(portal.events_of(1, "stopped") + portal.events_of(2, "stopped")) == 2)
    for job_id in (1, 2):
        [stopped] = portal.events_of(job_id, "stopped")
        assert stopped["message"] == "stopped: portal unreachable for 0.6 s" and stopped["signal"] == 15


def test_it_follows_the_interval_and_timeout_of_the_portals_latest_heartbeat_answer(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    """The portal lengthens a node's interval and timeout as its fleet grows and says so in heartbeat answers:
    the agent heartbeats that often and, the portal lost, keeps its jobs that long, no longer."""
    portal.assign(1, "sleep 30")
    agent = make_agent()
    with running(agent):
        wait_until(lambda: portal.events_of(1, "started"))
        assert (agent.interval_s, agent.timeout_s) == (0.1, 30.0)
        portal.interval_s, portal.timeout_s = 0.5, 1.2  # (a test's numbers: the portal's are seconds apart)
        wait_until(lambda: (agent.interval_s, agent.timeout_s) == (0.5, 1.2))
        beats = len(portal.heartbeats)
        time.sleep(1.5)
        assert 1 <= len(portal.heartbeats) - beats <= 5, "about one heartbeat every 0.5 s, not every 0.1 s"
        portal.down = True
        wait_until(lambda: not agent.executor.jobs, timeout=5)
        portal.down = False
        wait_until(lambda: portal.events_of(1, "stopped"))
    [stopped] = portal.events_of(1, "stopped")
    assert stopped["message"] == "stopped: portal unreachable for 1.2 s"
    assert json.loads((agent.config.work_dir / "agent.json").read_text())["heartbeat_timeout_s"] == 1.2


def test_the_beat_after_a_registers_first_comes_at_a_random_phase_then_every_interval(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    """Nodes that register together must not heartbeat together ever after: the second beat since a register
    comes a random part of the interval after the first (here a quarter), the next ones an interval apart."""
    now = [0.0]
    agent = make_agent()
    agent._clock, agent.phase = (lambda: now[0]), (lambda: 0.25)
    portal.interval_s = 10.0

    def beats_at(t: float) -> int:
        now[0] = t
        before = len(portal.heartbeats)
        agent.step()
        return len(portal.heartbeats) - before

    assert beats_at(0.0) == 1 and len(portal.registrations) == 1  # registered, then beat at once
    assert [beats_at(t) for t in (2.4, 2.5, 12.4, 12.5, 22.4, 22.5)] == [0, 1, 0, 1, 0, 1]
    agent.registered = False  # as when the portal asks for a register: the phase is drawn again
    agent.phase = lambda: 0.5
    assert beats_at(22.6) == 0 and len(portal.registrations) == 2  # the last beat's interval still runs
    assert [beats_at(t) for t in (32.5, 37.4, 37.5, 47.5)] == [1, 0, 1, 1]


def test_a_fake_gpu_shows_load_only_while_its_job_runs(portal: StandInPortal, make_agent: MakeAgent) -> None:
    agent = make_agent()
    busy, idle = (gpu.uuid for gpu in agent.devices)
    portal.assign(1, "sleep 30", gpus=[{"index": 0, "uuid": busy, "share": 1.0}])

    def utilization() -> dict[str, float]:
        """The latest sample of each GPU (GPUs are sampled once an interval: a heartbeat news brings early
        carries none)."""
        latest = next((beat["telemetry"] for beat in reversed(portal.heartbeats) if beat["telemetry"]), [])
        return {row["uuid"]: row["util_pct"] for row in latest}

    with running(agent):
        wait_until(lambda: utilization().get(busy, 0) > 50)
        assert utilization()[idle] == 0
        portal.unassign(1)
        wait_until(lambda: portal.events_of(1, "exited"))
        wait_until(lambda: utilization().get(busy) == 0)


def test_a_scripted_xid_reaches_the_portal_as_an_unhealthy_gpu(portal: StandInPortal, make_agent: MakeAgent):
    agent = make_agent({**SMALL_NODE, "faults": [{"at_s": 0.2, "gpu": 1, "xid": 79}]})
    with running(agent):
        wait_until(
            lambda: any(not g["healthy"] for g in portal.heartbeats[-1]["gpus"]) if portal.heartbeats else 0
        )
    rows = [row for beat in portal.heartbeats for row in beat["telemetry"] if row["xid"] is not None]
    assert [(row["uuid"], row["xid"]) for row in rows] == [(agent.devices[1].uuid, 79)]
    health = portal.heartbeats[-1]["gpus"]
    assert health[1] == {"uuid": agent.devices[1].uuid, "healthy": False, "reason": "XID 79"}
    assert health[0]["healthy"]


def test_on_shutdown_it_stops_its_jobs_gracefully_and_says_why(portal: StandInPortal, make_agent: MakeAgent):
    portal.assign(1, "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.05; done")
    agent = make_agent()
    with running(agent):
        wait_until(lambda: portal.log_text(1) == "ready\n")
    [stopped] = portal.events_of(1, "stopped")
    assert (stopped["exit_code"], stopped["message"]) == (0, "stopped: the node agent is shutting down")
    assert portal.log_text(1).startswith("ready\n") and portal.log_text(1).endswith("bye\n")
    assert portal.heartbeats[-1]["running"] == [] and agent.executor.jobs == {}


def test_it_refuses_nothing_silently_when_an_assignment_is_malformed(
    portal: StandInPortal, make_agent: MakeAgent
):
    portal.assign(1, "sleep 30")
    agent = make_agent()
    with running(agent):
        wait_until(lambda: portal.events_of(1, "started"))
        portal.assign(1, "sleep 30", gpus=[{"index": 0}])  # no uuid: cannot act on it, but it is listed
        beats = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) > beats + 2)
        assert "1:1" in agent.executor.jobs and agent.executor.jobs["1:1"].state == "running"


def test_a_job_stopped_before_it_started_is_reported_ended_without_running(portal: StandInPortal, make_agent):
    portal.assign(1, "sleep 30", desired="stopped")
    agent = make_agent()
    with running(agent):
        [ended] = wait_until(lambda: portal.events_of(1, "exited"))
    assert ended["message"] == "stopped before it started" and portal.events_of(1, "started") == []


def test_a_long_final_log_is_sent_over_several_passes_before_the_end_event(
    portal: StandInPortal, make_agent: MakeAgent, monkeypatch
) -> None:
    monkeypatch.setattr("scheduler.agent.outbox.FINAL_LOG_BYTES_PER_PASS", 64 * 1024)
    portal.assign(1, "head -c 300000 /dev/zero | tr '\\0' x")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(1, "exited"))
    assert portal.log_text(1) == "x" * 300_000


def test_a_refused_telemetry_batch_is_dropped_and_a_refused_gpu_list_makes_it_register_again(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    portal.refuse_heartbeats = [(400, {"detail": "bad row", "field": "telemetry"})]
    with running(make_agent()):
        wait_until(lambda: any(beat["telemetry"] for beat in portal.heartbeats))
        assert len(portal.registrations) == 1
        sent = [len(beat["telemetry"]) for beat in portal.heartbeats if beat["telemetry"]]
        assert sent[0] == 2  # the next samples alone (one row a GPU): the refused batch was not resent
        portal.refuse_heartbeats = [(400, {"detail": "unknown GPU UUID", "field": "gpus"})]
        wait_until(lambda: len(portal.registrations) == 2)


def test_a_job_that_cannot_start_fails_alone_and_the_others_still_start(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    portal.assign(1, "echo one", env={"A=B": "x"})  # the operating system refuses this environment
    portal.assign(2, "echo two", env={"NOTE": "a\0b"})
    portal.assign(3, "echo three")
    with running(make_agent()):
        wait_until(lambda: portal.events_of(3, "exited"))
        [refused_name] = wait_until(lambda: portal.events_of(1, "start_failed"))
        [refused_value] = wait_until(lambda: portal.events_of(2, "start_failed"))
    assert refused_name["message"] == "invalid environment variable name 'A=B'"
    assert refused_value["message"] == "cannot start: embedded null byte"
    assert portal.log_text(3) == "three\n" and portal.events_of(1, "started") == []


def test_any_error_while_starting_a_job_fails_that_job_only(
    portal: StandInPortal, make_agent: MakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent()
    start = agent.executor.start

    def failing_start(assignment: Assignment) -> JobEvent:
        if assignment.job_id == 1:
            raise RuntimeError("disk on fire")
        return start(assignment)

    monkeypatch.setattr(agent.executor, "start", failing_start)
    portal.assign(1, "echo one")
    portal.assign(2, "echo two")
    with running(agent):
        wait_until(lambda: portal.events_of(2, "exited"))
        [failed] = wait_until(lambda: portal.events_of(1, "start_failed"))
        beats = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) > beats + 2)
    assert failed["message"] == "cannot start: RuntimeError: disk on fire"
    assert len(portal.events_of(1)) == 1  # reported once, never tried again


def test_reports_the_portal_refuses_for_good_are_dropped_not_resent(
    portal: StandInPortal, make_agent: MakeAgent
) -> None:
    portal.refuse_jobs[1] = (409, {"detail": "attempt 1 of job 1 is over", "field": "attempt"})
    portal.assign(1, "echo out")
    agent = make_agent()
    with running(agent):
        wait_until(lambda: [kind for _, kind, body in portal.refused if body.get("type") == "exited"])
        sent = len(portal.refused)
        beats = len(portal.heartbeats)
        wait_until(lambda: len(portal.heartbeats) > beats + 3)
        assert len(portal.refused) == sent
    assert not agent.outbox and not agent.executor.unreported


def test_the_register_body_names_the_executor_and_whether_it_isolates_tenants(make_agent, portal) -> None:
    agent = make_agent()
    assert agent.register()
    executor = portal.registrations[-1]["executor"]
    assert (executor["name"], executor["isolates"], executor["runtime"]) == ("process", False, "")
    assert "does not isolate tenants" in executor["detail"]
