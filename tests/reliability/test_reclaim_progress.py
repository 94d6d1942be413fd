"""Reclaim must make progress. bench/load.py with 10 teams whose guarantees add up to the whole pool
(``--guaranteed 1.0``) saw 1,330 reclaim preemptions for 32 finished jobs in two minutes: GPUs freed by
finishing jobs went to borrowing teams ahead of teams under their guarantee, which then reclaimed them.
Fixed by admitting in-guarantee work first within each priority level. This drives the real cycle and
node services with that shape."""

import random

import pytest
from django.db.models import Count

from portal.models import Membership
from scheduler.cycle import run_cycle
from scheduler.models import Job, Preemption
from scheduler.services.node_jobs import node_job_event
from scheduler.services.nodes import node_heartbeat
from tests.factories import GpuFactory, MembershipFactory, NodeFactory, QuotaFactory, TeamFactory, UserFactory
from tests.reliability.helpers import assert_sound, submit

pytestmark = pytest.mark.django_db

TEAMS, NODES, GPUS, JOBS, ROUNDS = 10, 5, 8, 120, 8


def test_reclaims_between_teams_make_progress(cluster):
    rng = random.Random(7)
    pool, h100 = cluster["pool"], cluster["h100"]
    cluster["nodes"][0].gpus.all().delete()
    nodes = []
    for n in range(NODES):
        node = NodeFactory(name=f"rc-{n}", pool=pool)
        for i in range(GPUS):
            GpuFactory(node=node, index=i, model=h100, uuid=f"GPU-rc-{n}-{i}")
        nodes.append(node)
    users = []
    for t in range(TEAMS):
        team = TeamFactory(name=f"rc{t}")
        pool.teams.add(team)
        QuotaFactory(team=team, gpu_model=h100, guaranteed=NODES * GPUS // TEAMS, limit=NODES * GPUS)
        user = UserFactory(username=f"rc{t}")
        MembershipFactory(user=user, team=team, role=Membership.MEMBER)
        users.append(user)
    for k in range(JOBS):
        submit(users[k % TEAMS], gpus=rng.choice((1, 1, 1, 2, 4)), command="sleep 1")
    seq = {n.pk: 0 for n in nodes}
    ran_rounds: dict[tuple[int, int], int] = {}
    for _ in range(ROUNDS):
        run_cycle()
        for node in nodes:
            seq[node.pk] += 1
            node.refresh_from_db()
            node_heartbeat(node=node, report={"seq": seq[node.pk]})
        for job in Job.objects.filter(state__in=("starting", "running")).order_by("pk"):
            node = job.allocations.filter(ended_at__isnull=True).first().node
            if job.stop_reason:
                node_job_event(node=node, job_id=job.pk, event={"type": "stopped", "attempt": job.attempt,
                                                                "signal": 15})
            elif job.state == "starting":
                node_job_event(node=node, job_id=job.pk, event={"type": "started", "attempt": job.attempt})
            else:
                key = (job.pk, job.attempt)
                ran_rounds[key] = ran_rounds.get(key, 0) + 1
                if ran_rounds[key] >= 2:
                    node_job_event(node=node, job_id=job.pk, event={"type": "exited", "attempt": job.attempt,
                                                                    "exit_code": 0})
    assert_sound()
    finished = Job.objects.filter(state="succeeded").count()
    preemptions = Preemption.objects.count()
    print(f"\n[figure] reclaim progress: {finished} finished, {preemptions} preemptions in {ROUNDS} rounds")
    most = (Preemption.objects.values("job").annotate(n=Count("id")).order_by("-n")
            .values_list("n", flat=True).first() or 0)
    print(f"[figure] reclaim progress: a job was preempted at most {most} times")
    assert preemptions <= finished and most <= 2
