"""A job event is read without DRF's walk over its fields when every value is plainly valid
(``scheduler.api.plain``): what it gives is exactly what DRF's walk gives, and anything else goes DRF's way."""

import random

import pytest
from rest_framework import serializers

from scheduler.agent.jobs import JobEvent
from scheduler.api.node import EventSerializer
from scheduler.api.node_events import BatchEventSerializer, BatchSerializer
from scheduler.api.plain import plain_validated

VALUES = {  # for each field: plain values, edges DRF converts or refuses, and absence
    "job_id": [1, 7, 2**63 - 1, 2**63, 0, -1, "7", 7.0, True, None],
    "attempt": [1, 3, 2**31 - 1, 2**31, 0, "2", 2.0, False, None, []],
    "type": ["started", "exited", "stopped", "start_failed", "checkpoint", "Started", "", 1, None],
    "pid": [None, 0, 123, -5, "12", 1.5, True, {}],
    "exit_code": [None, 0, 1, -255, 255, 256, -256, "1", 1.0, False],
    "signal": [None, 0, 9, 128, 129, -1, "9"],
    "message": ["", "done", "  padded  ", "   ", "x" * 500, " " + "x" * 500 + " ", "x" * 501, "é", "a\x00b",
                "\ud800", None, 5, 5.5, True, ["x"]],
    "reason": ["", "OOMKilled", "ImagePullFailed", "Unhealthy", "oomkilled", None, 0],
    "at": ["", "2026-12-07T02:00:00+00:00", "  2026-12-07T02:00:00Z ", "x" * 40, "x" * 41, None, 3],
    "address": ["", "   ", "10.0.0.1:8000", "[::1]:80", "bad address", None, 8],
    "health": ["", "starting", "healthy", "nope", None],
    "extra": ["ignored"],
}


def drf_walk(serializer, data):
    """DRF's own walk over the serializer's fields: the data, or None when it refuses ``data``."""
    try:
        return serializers.Serializer.to_internal_value(serializer, data)
    except serializers.ValidationError:
        return None


@pytest.mark.parametrize("serializer_class", [EventSerializer, BatchEventSerializer])
def test_a_plainly_valid_event_reads_as_drfs_walk_reads_it_and_any_other_goes_drfs_way(serializer_class):
    serializer = serializer_class()
    rng = random.Random(24)
    plain = 0
    for _ in range(5000):  # a plain event, then up to 3 of its fields changed or left out
        body = {"job_id": 7, "attempt": 1, "type": "exited", "exit_code": 0}
        for name in rng.sample(list(VALUES), rng.randint(0, 3)):
            body[name] = rng.choice(VALUES[name])
            if rng.random() < 0.1:
                del body[name]
        read = plain_validated(serializer.fields.items(), body)
        expected = drf_walk(serializer, body)
        if read is not None:
            plain += 1
            assert read == expected, body
        if expected is not None:  # its ``at`` is read in ``validate``
            assert serializer_class().to_internal_value(body) == expected, body
    assert 1000 < plain < 4500  # both ways were taken often
    for body in ([], "x", None, {"events": []}):
        assert plain_validated(serializer.fields.items(), body) is None


def test_the_agents_own_events_are_read_plainly(monkeypatch):
    """What the node agent sends (``JobEvent.body``) never needs DRF's walk, but a service's address."""
    serializer = BatchEventSerializer()
    at = "2026-12-07T02:00:00+00:00"
    bodies = [JobEvent(job_id=5, attempt=1, type="started", at=at, pid=42, health="starting").body(),
              JobEvent(job_id=5, attempt=1, type="exited", at=at, exit_code=0).body(),
              JobEvent(job_id=5, attempt=2, type="exited", at=at, exit_code=137, signal=9, reason="OOMKilled",
                    message="Killed").body(),
              JobEvent(job_id=5, attempt=1, type="start_failed", at=at, message="no such image",
                    reason="ImagePullFailed").body()]
    for body in bodies:
        body["job_id"] = 5
        assert plain_validated(serializer.fields.items(), body) == drf_walk(serializer, body)
    with monkeypatch.context() as patched:
        patched.setattr(serializers.IntegerField, "run_validation", lambda *_: pytest.fail("DRF's walk"))
        batch = BatchSerializer(data={"events": bodies})
        assert batch.is_valid() and batch.validated_data["events"][2]["reason"] == "OOMKilled"
    address = {**bodies[0], "address": "10.0.0.1:8000"}
    assert plain_validated(serializer.fields.items(), address) is None
    assert BatchEventSerializer(data=address).is_valid()
