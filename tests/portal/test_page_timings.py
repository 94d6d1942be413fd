"""Server time of the main pages with demo-sized data: the demo's teams, users, pools and quotas
(``seed_demo``), its fake cluster (2×8 H100 + 4 A100), 28 days of history (3,000 finished jobs with their
allocations, a few hundred failures), 16 running and 300 waiting jobs after a scheduling cycle, templates and
audit entries. Each page is fetched three times and the best time counts. The target is under a second
(``TARGET_S``, flagged in the table); the test fails only past ``ROTA_PAGE_BUDGET_S`` (default 3 s), so a
machine busy with other suites does not fail it while a real regression does. Run with ``-s`` to see the
table; set ``ROTA_PAGE_BUDGET_S=1`` on a quiet machine to hold the target strictly."""

import os
import random
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from portal.audit import audit_record
from portal.models import Team
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Gpu, GpuModel, Job, JobTemplate, Node, PriorityClass
from scheduler.models.jobs import JobState
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
FINISHED = 3000
WAITING = 300
TARGET_S = 1.0
BUDGET_S = float(os.environ.get("ROTA_PAGE_BUDGET_S", "3.0"))


@pytest.fixture
def demo(tmp_path):
    call_command("seed_demo", agents_dir=str(tmp_path / "agents"), stdout=open("/dev/null", "w"))
    rng = random.Random(6)
    now = db_now()
    models = {m.name: m for m in GpuModel.objects.all()}
    gpus = []
    for node in Node.objects.order_by("name"):
        kind, count = ("a100-40gb", 4) if "a100" in node.name else ("h100-80gb", 8)
        node.state, node.cpus, node.memory_mb = Node.READY, 224, 2063000
        node.save()
        for i in range(count):
            gpus.append(Gpu(node=node, index=i, uuid=f"GPU-{node.name}-{i}", model=models[kind],
                            memory_mb=models[kind].memory_mb, util_pct=rng.uniform(0, 100)))
    gpus = Gpu.objects.bulk_create(gpus)
    users = {u.username: u for u in UserFactory._meta.model.objects.all()}
    teams = {t.name: t for t in Team.objects.all()}
    members = [("alice", "vision"), ("bob", "vision"), ("carol", "nlp"), ("dave", "speech")]
    training = PriorityClass.objects.get(name="training")
    jobs = []
    for i in range(FINISHED):
        user, team = members[i % len(members)]
        state = JobState.FAILED if i % 10 == 0 else JobState.SUCCEEDED
        jobs.append(Job(team=teams[team], submitted_by=users[user], name=f"hist-{i}", command="python train.py",
                        priority_class=training, state=state, exit_code=1 if state == JobState.FAILED else 0,
                        failure_class="user" if state == JobState.FAILED else "", gpus=1,
                        gpu_model=gpus[i % len(gpus)].model, finished_at=now - timedelta(minutes=13 * i)))
    jobs = Job.objects.bulk_create(jobs)
    allocs = []
    for i, job in enumerate(jobs):
        gpu = gpus[i % len(gpus)]
        end = now - timedelta(minutes=13 * i)
        allocs.append(Allocation(job=job, attempt=1, gpu=gpu, node_id=gpu.node_id,
                                 started_at=end - timedelta(minutes=rng.randint(5, 600)), ended_at=end))
    Allocation.objects.bulk_create(allocs)
    for i in range(WAITING + 16):
        user, team = members[i % len(members)]
        job_submit(user=users[user], team=team, name=f"live-{i}", command="python train.py",
                   gpu_model="h100-80gb" if i % 3 else "a100-40gb", gpus=1 + i % 2,
                   kind=["training", "evaluation", "data-processing"][i % 3])
    run_cycle()
    for i in range(200):
        audit_record(actor=users["admin"], action="quota.update", object_type="quota", object_name=f"vision/{i}",
                     before={"limit": i}, after={"limit": i + 1}, reason="demo")
    for i in range(10):
        JobTemplate.objects.create(team=teams["vision"], name=f"tpl-{i}", kind="training",
                                   fields={"command": "python train.py", "gpus": 2})
    return {"users": users, "job": Job.objects.filter(state=JobState.PENDING, team__name="vision").first()}


PAGES = [
    ("alice", "/"), ("alice", "/jobs/"), ("alice", "/jobs/?scope=team&state=finished"), ("alice", "/jobs/new/"),
    ("alice", "/teams/vision/"), ("bob", "/teams/vision/"), ("alice", "/teams/vision/templates/"),
    ("alice", "/cluster/"), ("alice", "JOB"), ("admin", "/jobs/?scope=all"), ("admin", "/govern/quotas/"),
    ("admin", "/govern/queue/"), ("admin", "/govern/nodes/"), ("admin", "/govern/audit/"),
    ("admin", "/govern/pools/"), ("bob", "/accounting/"),
]


def test_every_main_page_answers_within_a_second_with_demo_data(demo):
    rows = []
    for username, url in PAGES:
        if url == "JOB":
            url = f"/jobs/{demo['job'].pk}/"
        client = Client()
        client.force_login(demo["users"][username])
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - t0
            assert response.status_code == 200, (url, response.status_code)
            best = elapsed if best is None else min(best, elapsed)
        rows.append((username, url, best))
    print("\nserver time per page (best of 3):")
    for username, url, best in rows:
        flag = "  over the 1 s target" if best > TARGET_S else ""
        print(f"  {best * 1000:7.1f} ms  {username:6} {url}{flag}")
    slow = [(url, round(best, 3)) for _, url, best in rows if best > BUDGET_S]
    assert not slow, slow
