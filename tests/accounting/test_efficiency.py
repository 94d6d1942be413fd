"""Utilized GPU-hours and efficiency from telemetry: rollups for old hours, raw samples for recent ones."""

import csv
import io
from datetime import timedelta

import pytest

from accounting.services import usage_rollup
from scheduler.models import Gpu, GpuSample, GpuSampleRollup
from tests.accounting.conftest import NOV
from tests.accounting.helpers import allocate, make_job

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def test_it_weights_gpu_seconds_by_utilization_where_telemetry_exists(api, alice, cluster):
    job = make_job(alice, cluster["vision"], name="half-busy")
    gpu = Gpu.objects.get(uuid="GPU-h100-0")
    start = NOV + timedelta(days=2)
    allocate(job, gpu, start, start + 3 * H)
    GpuSampleRollup.objects.create(gpu=gpu, job=job, hour=start, samples=60, util_avg=50.0)  # hour 1: rolled up
    for minute, util in ((5, 80.0), (35, 100.0)):  # hour 2: raw samples, 90 % on average
        GpuSample.objects.create(
            gpu=gpu, node=gpu.node, job=job, at=start + H + timedelta(minutes=minute), util_pct=util
        )
    usage_rollup(until=start + 4 * H)  # hour 3: no telemetry, left out of efficiency
    response = api(alice).get("/api/v1/reports/chargeback/", {"month": "2026-11", "format": "csv"})
    (row,) = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert float(row["allocated_gpu_hours"]) == 3.0
    assert float(row["utilized_gpu_hours"]) == pytest.approx(1.4)
    assert float(row["efficiency"]) == pytest.approx(0.7)


def test_without_telemetry_efficiency_is_blank_not_zero(api, alice, usage):
    response = api(alice).get("/api/v1/reports/chargeback/", {"month": "2026-11", "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows and all(r["efficiency"] == "" and r["utilized_gpu_hours"] == "" for r in rows)
