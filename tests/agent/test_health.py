"""GPU health judged from samples and events, and the telemetry rows it feeds."""

import datetime as dt

from scheduler.agent.gpu.base import ECC, LOST, XID, GpuEvent, GpuInfo, GpuSample
from scheduler.agent.health import HealthTracker
from scheduler.agent.wire import iso, telemetry_entries

AT = dt.datetime(2026, 1, 31, 12, 0, tzinfo=dt.UTC)
GPUS = [GpuInfo(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", "h100-80gb", 81559) for i in range(4)]


def health_of(tracker: HealthTracker) -> dict[str, tuple[bool, str]]:
    return {row["uuid"]: (row["healthy"], row["reason"]) for row in tracker.report()}


def test_every_gpu_starts_healthy() -> None:
    assert set(health_of(HealthTracker(GPUS)).values()) == {(True, "")}


def test_a_critical_xid_marks_the_gpu_unhealthy_with_a_reason_and_it_stays_so() -> None:
    tracker = HealthTracker(GPUS)
    xids = tracker.observe([], [GpuEvent("GPU-3", 3, XID, AT, 79)])
    assert xids == {"GPU-3": [79]}
    assert health_of(tracker)["GPU-3"] == (False, "XID 79")
    tracker.observe([GpuSample("GPU-3", 3, AT, temperature_c=40)], [])
    assert health_of(tracker)["GPU-3"] == (False, "XID 79")
    assert health_of(tracker)["GPU-2"] == (True, "")


def test_an_application_xid_is_reported_but_leaves_the_gpu_healthy() -> None:
    tracker = HealthTracker(GPUS)
    assert tracker.observe([], [GpuEvent("GPU-1", 1, XID, AT, 13)]) == {"GPU-1": [13]}
    assert health_of(tracker)["GPU-1"] == (True, "")


def test_uncorrected_ecc_errors_and_lost_gpus_are_unhealthy() -> None:
    tracker = HealthTracker(GPUS)
    tracker.observe(
        [GpuSample("GPU-0", 0, AT, ecc_uncorrected=2), GpuSample("GPU-2", 2, AT, lost=True)],
        [GpuEvent("GPU-1", 1, ECC, AT), GpuEvent("GPU-3", 3, LOST, AT)],
    )
    health = health_of(tracker)
    assert health["GPU-0"] == (False, "2 uncorrected ECC errors")
    assert health["GPU-1"] == (False, "uncorrected ECC error")
    assert health["GPU-2"] == (False, "GPU is lost")
    assert health["GPU-3"] == (False, "GPU is lost")


def test_over_temperature_is_unhealthy_only_while_it_lasts() -> None:
    tracker = HealthTracker(GPUS, max_temperature_c=90)
    tracker.observe([GpuSample("GPU-0", 0, AT, temperature_c=95)], [])
    assert health_of(tracker)["GPU-0"] == (False, "temperature 95 C over the 90 C limit")
    tracker.observe([GpuSample("GPU-0", 0, AT, temperature_c=70)], [])
    assert health_of(tracker)["GPU-0"] == (True, "")


def test_a_reason_names_the_fault_and_leaves_the_device_to_the_portal() -> None:
    mig = GpuInfo(
        132, "MIG-x", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-1g.5gb", 4864, True, physical_index=3
    )
    tracker = HealthTracker([mig])
    tracker.observe([], [GpuEvent("MIG-x", 132, XID, AT, 79)])
    assert health_of(tracker)["MIG-x"] == (False, "XID 79")


def test_telemetry_rows_follow_the_protocol_and_carry_each_new_xid() -> None:
    samples = [GpuSample("GPU-0", 0, AT, 87.0, 30000, 61, 410.5, 1980, 0), GpuSample("GPU-1", 1, AT)]
    rows = telemetry_entries(samples, {"GPU-0": [13, 79]})
    assert rows[0] == {
        "uuid": "GPU-0",
        "at": "2026-01-31T12:00:00.000Z",
        "util_pct": 87.0,
        "mem_used_mb": 30000,
        "temperature_c": 61,
        "power_w": 410.5,
        "sm_clock_mhz": 1980,
        "ecc_uncorrected": 0,
        "xid": 13,
    }
    assert [(r["uuid"], r["xid"]) for r in rows] == [("GPU-0", 13), ("GPU-0", 79), ("GPU-1", None)]
    assert rows[1]["at"] == "2026-01-31T12:00:00.001Z"  # the portal keeps only rows newer than the last
    assert rows[2]["util_pct"] is None
    assert iso(AT) == "2026-01-31T12:00:00.000Z"
