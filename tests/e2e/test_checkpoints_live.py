"""Checkpoints through the live system: a real node agent sees the job touch $ROTA_CHECKPOINT_FILE and the
portal records it; when reclaim preempts the job, the checkpoint it writes in its grace period is the one the
lost work is counted from, and that work is credited back to its team's fair-share usage."""

import pytest

from scheduler.models import Job, Preemption
from tests.e2e.test_preemption_live import client_for, lender_and_small_node
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Saves at start, then again when asked to stop (in its grace period), and exits; resumes at once on attempt 2.
SAVING = ('if [ "$ROTA_ATTEMPT" -gt 1 ]; then exit 0; fi; echo start > "$ROTA_CHECKPOINT_FILE"; '
          "trap 'echo stop > \"$ROTA_CHECKPOINT_FILE\"; exit 0' TERM; while true; do sleep 0.1; done")


def test_a_checkpoint_file_written_in_the_grace_period_bounds_the_work_reclaim_loses(
    alice, cluster, celery_worker, start_agent, settings, tmp_path
):
    from scheduler.selectors_lost_work import lost_work_credits
    from scheduler.services.common import db_now

    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    nina = lender_and_small_node(cluster, start_agent, tmp_path)
    vision = client_for(alice)
    jobs = [vision.post("/api/v1/jobs/", {"name": f"v{i}", "gpu_model": "h100-80gb", "command": SAVING},
                        format="json").json()["id"] for i in range(4)]
    wait_for(lambda: Job.objects.filter(pk__in=jobs, state="running", last_checkpoint_at__isnull=False).count() == 4,
             timeout=60, what="vision's 4 jobs to run and report the checkpoint they save at start")
    first = dict(Job.objects.filter(pk__in=jobs).values_list("pk", "last_checkpoint_at"))
    assert all(Job.objects.get(pk=pk).started_at <= at for pk, at in first.items())

    owner_job = client_for(nina).post("/api/v1/jobs/", {
        "name": "nlp-reclaims", "gpu_model": "h100-80gb", "command": "sleep 1"}, format="json").json()["id"]
    wait_for(lambda: Preemption.objects.filter(completed_at__isnull=False).exists(), timeout=60,
             what="reclaim to preempt a vision job and its processes to end")
    [preemption] = Preemption.objects.all()
    assert preemption.by_job_id == owner_job
    assert preemption.work_since > first[preemption.job_id], "the checkpoint saved in the grace period"
    lost = (preemption.completed_at - preemption.work_since).total_seconds()
    assert preemption.gpu_seconds_lost == pytest.approx(lost, abs=1e-3) and 0 <= lost < 5  # (stored to µs)
    now, half_life = db_now(), 7 * 24 * 3600.0
    weight = 0.5 ** ((now - preemption.completed_at).total_seconds() / half_life)
    assert lost_work_credits(now, half_life) == {"vision": pytest.approx(preemption.gpu_seconds_lost * weight)}
