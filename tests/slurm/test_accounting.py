"""Accounting reconciliation and "never submit twice" after MinJobAge, through the real Slurm: Slurm's job
completion log is compared with Rota's ledger for each attempt the bridge ran; a job that ended while the bridge
was down, and that squeue has forgotten since, is found in that log and not submitted again."""

import re
import time
from collections.abc import Iterator

import pytest
from django.test import Client

from scheduler.models import JobLog, SlurmAccounting
from scheduler.slurm.localcluster import SlurmCluster
from tests.reliability.helpers import assert_sound
from tests.slurm.test_launch import poll_until, poll_until_output, slurm_jobs, submitted


def recorded(bridge, job, timeout: float = 20.0) -> SlurmAccounting:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bridge.poll()
        row = SlurmAccounting.objects.filter(job=job, attempt=job.attempt).first()
        if row:
            return row
        time.sleep(0.2)
    reconciler = bridge.reconciler
    raise AssertionError(f"no Slurm accounting recorded for job {job.pk}: unsent {list(reconciler.unsent)}, "
                         f"completed {list(reconciler.completed)}, log {reconciler.jobcomp.path.read_text()!r}")


def admin_sees(user, path: str) -> str:
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def metric(text: str, name: str, node: str) -> float:
    match = re.search(rf'^{name}{{node="{node}"}} (\S+)$', text, re.M)
    assert match, f"{name} for {node} not in /metrics"
    return float(match[1])


@pytest.fixture
def short_min_job_age(slurm: SlurmCluster) -> Iterator[None]:
    """MinJobAge=2 s for one test: slurmctld forgets an ended job from squeue within about 15 s."""
    conf = slurm.conf.read_text()
    slurm.conf.write_text(conf.replace(f"MinJobAge={slurm.min_job_age_s}", "MinJobAge=2"))
    slurm.client("scontrol", "reconfigure")
    try:
        yield
    finally:
        slurm.conf.write_text(conf)
        slurm.client("scontrol", "reconfigure")


def test_slurms_record_and_rotas_ledger_agree_for_a_job_run_through_slurm(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = poll_until(bridge, submitted(alice, "sleep 3", gpus=2), ("succeeded", "failed"))
    row = recorded(bridge, job)
    assert (row.slurm_state, row.gpus, row.gpus_from_slurm, row.mismatch) == ("COMPLETED", 2, True, False)
    assert row.slurm_job_id == slurm_jobs(slurm, job.pk)[0]["job_id"]
    assert 3 <= row.elapsed_s <= 5 and row.slurm_gpu_seconds == row.elapsed_s * 2
    assert abs(row.difference_s) <= row.tolerance_s == 60  # 30 s per GPU by default
    text = admin_sees(alice, "/metrics")
    assert metric(text, "rota_slurm_accounting_records_total", slurm.node) == 1
    assert metric(text, "rota_slurm_accounting_mismatches_total", slurm.node) == 0
    assert "No mismatches." in admin_sees(alice, "/govern/slurm-accounting/")
    assert "agrees" in admin_sees(alice, "/govern/slurm-accounting/?all=1")


def test_a_job_that_ended_while_the_bridge_was_down_past_min_job_age_is_not_submitted_again_and_the_gap_is_a_mismatch(
        make_bridge, slurm, alice, short_min_job_age, settings):
    settings.ROTA_SLURM_ACCOUNTING_TOLERANCE_S = 5
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up; sleep 1; echo done", gpus=1)
    poll_until_output(bridge, job, "up")
    del bridge  # the bridge is down: the job ends in Slurm, and Slurm forgets it (MinJobAge)
    deadline = time.monotonic() + 90
    while slurm_jobs(slurm, job.pk) and time.monotonic() < deadline:
        time.sleep(1)
    assert slurm_jobs(slurm, job.pk) == [], "slurmctld kept the ended job past MinJobAge"
    time.sleep(settings.ROTA_SLURM_ACCOUNTING_TOLERANCE_S + 1)  # down long enough that the gap shows, however fast
    restarted = make_bridge()
    job = poll_until(restarted, job, ("succeeded", "failed"))
    for _ in range(3):
        restarted.poll()
    assert (job.state, job.attempt, job.exit_code) == ("succeeded", 1, 0)
    assert slurm_jobs(slurm, job.pk) == []  # never submitted again
    assert JobLog.objects.get(job=job, attempt=1).content == "up\ndone\n"
    log = slurm.root / "log" / "jobcomp.log"
    assert len(re.findall(rf"Name=rota-{job.pk}-1 ", log.read_text())) == 1
    row = recorded(restarted, job)
    # Rota held the GPU until the bridge came back and reported the end; Slurm ran the job about 3 s.
    assert row.mismatch and row.elapsed_s <= 5 and row.difference_s > row.tolerance_s == 5
    assert not row.gpus_from_slurm and row.gpus == 1  # squeue had forgotten it: Rota's GPU count is used
    assert metric(admin_sees(alice, "/metrics"), "rota_slurm_accounting_mismatches_total", slurm.node) == 1
    page = admin_sees(alice, "/govern/slurm-accounting/")
    assert "mismatch" in page and f"{job.pk}</a>.1" in page
    assert_sound(rollup=True)
