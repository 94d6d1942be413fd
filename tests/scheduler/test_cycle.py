"""The live scheduling cycle against PostgreSQL: starts, reasons with numbers, single-flight, guards."""

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def submit(user, **kw):
    return job_submit(user=user, **{"name": "j", "command": "true", "gpu_model": "h100-80gb", **kw})


def test_it_admits_a_pending_job_onto_concrete_gpus(alice):
    job = submit(alice, gpus=2)
    report = run_cycle()
    assert report.ran and report.started == 1
    job.refresh_from_db()
    assert job.state == "admitted" and job.admitted_at is not None
    allocs = list(Allocation.objects.filter(job=job, ended_at__isnull=True))
    assert len(allocs) == 2 and {a.node.name for a in allocs} == {"node-h100"}
    assert job.transitions.last().to_state == "admitted"


def test_a_job_over_its_team_limit_waits_with_quota_exceeded_and_the_numbers(alice):
    submit(alice, gpus=4)
    over = submit(alice, gpus=1)
    run_cycle()
    over.refresh_from_db()
    assert over.state == "pending"
    assert over.pending_reason_code == "QuotaExceeded"
    assert "4" in over.pending_reason_message and "vision" in over.pending_reason_message
    assert over.pending_reason_details.get("limit") == 4
    assert over.queue_position is not None


def test_a_job_no_node_could_ever_hold_is_marked_unsatisfiable(alice):
    job = submit(alice, gpus=16)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_reason_code == "Unsatisfiable"


def test_running_the_cycle_twice_changes_nothing_more(alice):
    submit(alice, gpus=1)
    run_cycle()
    again = run_cycle()
    assert again.started == 0
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 1


def test_a_held_job_is_skipped_with_reason_held(alice):
    from scheduler.services.jobs import job_hold, job_release

    job = job_hold(user=alice, job=submit(alice), why="waiting for the new dataset")
    run_cycle()
    job.refresh_from_db()
    # It stands nowhere in the queue (the walk skips it), and the cycle keeps who held it, and why.
    assert job.state == "held" and job.pending_reason_code == "Held" and job.queue_position is None
    assert job.pending_reason_message == "by alice: waiting for the new dataset"
    assert not Allocation.objects.exists()
    # Its own hold, its submitter may release.
    job = job_release(user=alice, job=job)
    assert (job.state, job.pending_reason_code, job.pending_reason_message) == (
        "pending", "Scheduling", "waiting for the next scheduling cycle")


@pytest.mark.django_db(transaction=True)
def test_only_one_cycle_runs_at_a_time(alice):
    submit(alice)
    holding = threading.Event()
    release = threading.Event()
    reports = []

    def hold_lock():
        from portal import locks

        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [locks.SCHEDULING_CYCLE])
            holding.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    holding.wait(10)
    try:
        reports.append(run_cycle())
    finally:
        release.set()
        holder.join()
    assert reports[0].ran is False
    assert run_cycle().started == 1


def test_the_database_refuses_a_gpu_in_two_open_exclusive_allocations(alice, cluster):
    job_a, job_b = submit(alice), submit(alice)
    gpu = cluster["nodes"][0].gpus.first()
    now = db_now()
    Allocation.objects.create(job=job_a, attempt=1, gpu=gpu, node=gpu.node, started_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=job_b, attempt=1, gpu=gpu, node=gpu.node, started_at=now)


def test_the_database_refuses_shares_of_one_gpu_adding_up_past_one(alice, cluster):
    job_a, job_b, job_c = submit(alice), submit(alice), submit(alice)
    gpu = cluster["nodes"][0].gpus.first()
    now = db_now()
    Allocation.objects.create(job=job_a, attempt=1, gpu=gpu, node=gpu.node, share_milli=500, started_at=now)
    Allocation.objects.create(job=job_b, attempt=1, gpu=gpu, node=gpu.node, share_milli=500, started_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=job_c, attempt=1, gpu=gpu, node=gpu.node, share_milli=250, started_at=now)
    Allocation.objects.filter(job=job_a).update(ended_at=db_now())
    Allocation.objects.create(job=job_c, attempt=1, gpu=gpu, node=gpu.node, share_milli=250, started_at=db_now())


def test_a_start_the_database_refuses_changes_nothing(alice, cluster):
    """If a GPU is already held (by anything), the start is refused whole: job stays pending."""
    from scheduler.core.types import Decisions, Placement, Start
    from scheduler.dispatch import persist_decisions

    blocker, job = submit(alice), submit(alice, gpus=2)
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    now = db_now()
    Allocation.objects.create(job=blocker, attempt=1, gpu=gpus[1], node=gpus[1].node, started_at=now)
    decisions = Decisions(starts=(Start(job_id=job.pk, placements=(Placement(gpus[0].pk), Placement(gpus[1].pk))),))
    result = persist_decisions(decisions, {g.pk: g.node_id for g in gpus}, now)
    assert result.started == 0 and result.refused == 1
    job.refresh_from_db()
    assert job.state == "pending"
    assert not Allocation.objects.filter(job=job).exists()
    assert Job.objects.get(pk=job.pk).transitions.count() == 1


def test_when_the_database_refuses_one_start_the_others_of_the_cycle_still_start(alice, cluster):
    """Starts are made together; a GPU held behind the cycle's back sends them one by one, refusing only it."""
    from scheduler.core.types import Decisions, Placement, Start
    from scheduler.dispatch import persist_decisions

    blocker, refused, fine = submit(alice), submit(alice), submit(alice, gpus=2)
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    now = db_now()
    Allocation.objects.create(job=blocker, attempt=1, gpu=gpus[0], node=gpus[0].node, started_at=now)
    decisions = Decisions(starts=(Start(job_id=refused.pk, placements=(Placement(gpus[0].pk),)),
                                  Start(job_id=fine.pk, placements=(Placement(gpus[1].pk), Placement(gpus[2].pk)))))
    result = persist_decisions(decisions, {g.pk: g.node_id for g in gpus}, now)
    assert (result.started, result.refused) == (1, 1)
    assert Job.objects.get(pk=refused.pk).state == "pending" and not Allocation.objects.filter(job=refused).exists()
    assert Job.objects.get(pk=fine.pk).state == "admitted"
    assert sorted(Allocation.objects.filter(job=fine).values_list("gpu_id", flat=True)) == [gpus[1].pk, gpus[2].pk]
    assert [t.to_state for t in Job.objects.get(pk=fine.pk).transitions.order_by("id")] == ["pending", "admitted"]


def test_a_cycle_starting_many_jobs_records_each_ones_transition_and_allocations(alice, cluster):
    jobs = [submit(alice) for _ in range(4)]
    report = run_cycle()
    assert report.started == 4
    for job in jobs:
        job.refresh_from_db()
        admitted = job.transitions.get(to_state="admitted")
        held = list(Allocation.objects.filter(job=job, ended_at__isnull=True).values_list("gpu_id", flat=True))
        assert job.state == "admitted" and job.admitted_at == admitted.at and job.queue_position is None
        assert admitted.from_state == "pending" and admitted.details["gpus"] == held and len(held) == 1
    assert Allocation.objects.filter(ended_at__isnull=True).values("gpu_id").distinct().count() == 4


def test_a_team_with_no_pool_access_gets_no_gpus(cluster):
    """Tenancy fails closed in the live snapshot too: a team in no pool's allow-list runs nowhere."""
    from portal.models import Membership
    from tests.factories import MembershipFactory, QuotaFactory, TeamFactory, UserFactory

    outsiders = TeamFactory(name="outsiders")
    QuotaFactory(team=outsiders, gpu_model=cluster["h100"], guaranteed=4, limit=4)
    user = UserFactory(username="olga")
    MembershipFactory(user=user, team=outsiders, role=Membership.MEMBER)
    job = submit(user)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_reason_code == "NoMatchingPool"


def test_the_snapshot_reads_every_field_of_every_job(alice, cluster):
    """The snapshot reads jobs as column values (model instances cost most of a big cycle): every field the
    engine reads, checked against literal values, and equal to ``job_info`` of the full model object."""
    from datetime import timedelta
    from operator import attrgetter

    from scheduler.core.types import HELD, PENDING, RUNNING, Placement
    from scheduler.models import Gpu
    from scheduler.services.jobs import job_hold
    from scheduler.snapshot import build_snapshot, job_info

    started = submit(alice, gpus=1, time_limit_minutes=30, cpus=4, memory_gb=16)
    share = submit(alice, gpus=1, gpu_fraction="0.25", gpu_memory_gb=10)
    run_cycle()
    labelled = submit(alice, gpus=2, pool="train", node_labels={"rack": "a"}, min_driver_version="550.54",
                      priority_class="batch", preemptible=True, kind="evaluation")
    any_model = submit(alice, gpus=1, gpu_model=None, nodes=1)
    held = job_hold(user=alice, job=submit(alice, gpus=1))
    t0 = db_now()
    Job.objects.filter(pk=started.pk).update(stop_reason="preempt", last_checkpoint_at=t0 + timedelta(seconds=9),
                                             attained_gpu_seconds=1234.5, started_at=t0 + timedelta(seconds=5))
    # a checkpoint from before the attempt started (an earlier attempt's) does not count for this one
    Job.objects.filter(pk=share.pk).update(last_checkpoint_at=t0 - timedelta(days=1))
    with transaction.atomic():
        snapshot, gpu_nodes = build_snapshot(db_now())
    jobs = {j.id: j for j in snapshot.jobs}
    assert set(jobs) == {started.pk, share.pk, labelled.pk, any_model.pk, held.pk}
    run, frac, lab, anym, hold = (jobs[j.pk] for j in (started, share, labelled, any_model, held))
    gpus = {a.gpu_id: a for a in Allocation.objects.filter(job=started)}
    assert (run.state, run.team, run.user, run.kind, run.priority_class, run.priority) == (
        RUNNING, "vision", "alice", "training", "training", 500)
    assert run.placements == tuple(Placement(g, 1.0) for g in sorted(gpus))
    assert run.started_at == (t0 + timedelta(seconds=5)).timestamp()  # started, not admitted
    assert (run.last_checkpoint_at, run.terminating, run.attained_gpu_s) == ((t0 + timedelta(seconds=9)).timestamp(),
                                                                            True, 1234.5)
    assert (run.time_limit_s, run.cpus, run.memory_mb, run.gpu_models) == (1800, 4, 16 * 1024, ("h100-80gb",))
    assert frac.started_at == Job.objects.get(pk=share.pk).admitted_at.timestamp()  # admitted, not started yet
    assert frac.last_checkpoint_at is None
    assert (frac.gpu_fraction, frac.gpu_memory_mb) == (0.25, 10 * 1024)
    assert (lab.state, lab.pool, lab.node_labels, lab.min_driver_version, lab.kind) == (
        PENDING, "train", {"rack": "a"}, "550.54", "evaluation")
    assert (lab.priority_class, lab.priority, lab.gpus) == ("batch", 300, 2)
    assert lab.time_limit_s == Job.objects.get(pk=labelled.pk).time_limit_minutes * 60  # the class's default
    assert lab.submitted_at == Job.objects.get(pk=labelled.pk).created_at.timestamp()
    assert (anym.gpu_models, anym.nodes, anym.pool, hold.state) == ((), 1, None, HELD)
    for info in snapshot.jobs:
        job = Job.objects.select_related("team", "submitted_by", "priority_class", "gpu_model", "pool").get(
            pk=info.id)
        placed = sorted((Placement(a.gpu_id, a.share_milli / 1000)
                         for a in job.allocations.filter(ended_at__isnull=True)), key=attrgetter("gpu_id"))
        assert info == job_info(job, placements=tuple(placed))
    assert gpu_nodes == dict(Gpu.objects.values_list("pk", "node_id"))


def test_the_cycle_builds_again_only_the_views_of_jobs_that_changed(alice, cluster):
    """``JobInfos`` keeps the last snapshot's job views: a job whose row, allocations and image pools are
    unchanged gets the very same ``JobInfo``; one that changed in any of them a new one, and the snapshot is
    always equal to one built from nothing."""
    from scheduler.models import Pool, PriorityClass
    from scheduler.snapshot import JobInfos, build_snapshot

    same, reprioritized, admitted, labelled = (submit(alice, gpus=1, name=f"j{n}") for n in range(4))
    infos = JobInfos()

    def both():
        with transaction.atomic():
            now = db_now()
            kept, _ = build_snapshot(now, infos=infos)
            fresh, _ = build_snapshot(now)
        assert kept == fresh
        return {j.id: j for j in kept.jobs}

    first = both()
    assert both() == first and all(info is first[pk] for pk, info in both().items())
    Job.objects.filter(pk=reprioritized.pk).update(priority_class=PriorityClass.objects.get(name="batch"))
    Job.objects.filter(pk=labelled.pk).update(node_labels={"rack": "b"})
    waiting = Job.objects.filter(pk__in=[same.pk, reprioritized.pk, labelled.pk])
    waiting.update(state="held")  # so that the cycle admits ``admitted`` alone, onto a GPU
    assert run_cycle().started == 1
    waiting.update(state="pending")
    second = both()
    assert second[same.pk] is first[same.pk]
    assert second[admitted.pk].placements and second[admitted.pk] is not first[admitted.pk]
    assert second[reprioritized.pk].priority_class == "batch" and second[labelled.pk].node_labels == {"rack": "b"}
    Pool.objects.update(allowed_images=["registry.example/only/*"])  # the image rule changed: every view again
    third = both()
    assert all(third[pk] is not second[pk] for pk in third)


def _row_versions() -> dict[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, xmin::text::bigint FROM scheduler_job WHERE state = 'pending'")
        return dict(cursor.fetchall())


def test_a_cycle_rewrites_only_the_waiting_jobs_whose_reason_position_or_estimate_changed(alice):
    """Every waiting job's row is written when its values change, and left alone otherwise (a steady queue
    would otherwise rewrite every pending row every few seconds)."""
    submit(alice, gpus=4)
    waiting = [submit(alice, gpus=1) for _ in range(3)]
    first = run_cycle()
    assert first.pending == 3
    run_cycle()  # the admitted job now counts as running: the waiting jobs get their estimated start
    before = _row_versions()
    again = run_cycle()
    assert again.pending == 3 and _row_versions() == before  # nothing changed: no row rewritten
    Job.objects.filter(pk=waiting[0].pk).update(queue_position=None)  # as if a new job, or a stale value
    details = Job.objects.get(pk=waiting[1].pk).pending_reason_details
    assert details["limit"] == 4 and isinstance(details["limit"], int)
    Job.objects.filter(pk=waiting[1].pk).update(pending_reason_details={**details, "limit": 4.0})  # 4.0 is not 4
    before = _row_versions()
    third = run_cycle()
    after = _row_versions()
    assert third.pending == 3
    assert [after[j.pk] == before[j.pk] for j in waiting] == [False, False, True]
    assert isinstance(Job.objects.get(pk=waiting[1].pk).pending_reason_details["limit"], int)
    assert Job.objects.get(pk=waiting[0].pk).queue_position is not None


def test_a_stored_position_or_estimate_close_enough_is_left_alone(alice):
    """A draining queue moves every position and many estimates a little each cycle: a stored one within a
    tenth (of the position; of the wait, and at least 10 s, for an estimate) is not rewritten, positions under
    10 are exact, and one further off is rewritten."""
    from datetime import timedelta

    from django.db.models import F

    submit(alice, gpus=4)
    waiting = [submit(alice, gpus=1) for _ in range(12)]
    run_cycle()
    run_cycle()  # the admitted job now counts as running: the waiting jobs get their estimated start
    stored = {j.pk: j for j in Job.objects.filter(pk__in=[w.pk for w in waiting])}
    assert [stored[w.pk].queue_position for w in waiting] == list(range(1, 13))
    assert all(j.estimated_start is not None for j in stored.values())
    wait_s = (stored[waiting[5].pk].estimated_start - db_now()).total_seconds()
    assert wait_s > 200  # so a tenth of it is more than the 10 s floor
    moved = {
        waiting[11].pk: {"queue_position": 13},  # 12 -> 13: within a tenth
        waiting[10].pk: {"queue_position": 14},  # 11 -> 14: further
        waiting[1].pk: {"queue_position": 3},  # 2 -> 3: under 10, exact
        waiting[4].pk: {"estimated_start": F("estimated_start") + timedelta(seconds=5)},  # within the floor
        waiting[5].pk: {"estimated_start": F("estimated_start") + timedelta(seconds=wait_s / 20)},  # a twentieth
        waiting[6].pk: {"estimated_start": F("estimated_start") + timedelta(seconds=wait_s / 5)},  # a fifth
        waiting[7].pk: {"estimated_start": None},
    }
    for pk, values in moved.items():
        Job.objects.filter(pk=pk).update(**values)
    before = _row_versions()
    run_cycle()
    after = _row_versions()
    rewritten = {w.pk for w in waiting if after[w.pk] != before[w.pk]}
    assert rewritten == {waiting[10].pk, waiting[1].pk, waiting[6].pk, waiting[7].pk}
    now = {j.pk: j for j in Job.objects.filter(pk__in=[w.pk for w in waiting])}
    assert [now[w.pk].queue_position for w in waiting] == [*range(1, 12), 13]  # the close one kept its 13
    assert now[waiting[6].pk].estimated_start == stored[waiting[6].pk].estimated_start
    assert now[waiting[7].pk].estimated_start == stored[waiting[7].pk].estimated_start


def test_decayed_usage_weighs_each_allocation_by_the_age_of_its_end(alice, cluster):
    """Fair share's usage history: GPU-seconds within four half-lives, halved per half-life since each
    allocation ended (open ones count up to now at full weight), clipped at the window's start."""
    from datetime import timedelta

    from scheduler.snapshot import decayed_usage

    hour, day = timedelta(hours=1), timedelta(days=1)
    now = db_now()
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    jobs = [submit(alice) for _ in range(4)]

    def allocate(job, gpu, started, ended, share=1000):
        Allocation.objects.create(job=job, attempt=1, gpu=gpu, node=gpu.node, share_milli=share,
                                  started_at=started, ended_at=ended)

    allocate(jobs[0], gpus[0], now - day - hour, now - day)  # 1 h ended one half-life ago: 3600 * 0.5
    allocate(jobs[1], gpus[1], now - hour / 2, None, share=500)  # open, half a GPU for 30 min: 900
    allocate(jobs[2], gpus[2], now - 6 * day, now - 5 * day)  # ended before the window (4 half-lives)
    allocate(jobs[3], gpus[3], now - 4 * day - hour, now - 4 * day + hour)  # 1 h of it inside, * 0.5 ** 4
    usage = decayed_usage(now, half_life_s=86400)
    assert set(usage) == {"vision"}
    assert usage["vision"] == pytest.approx(1800 + 900 + 3600 * 0.5 ** (4 - 1 / 24), rel=1e-9)


def test_a_job_for_any_model_never_gets_a_mig_slice_in_the_live_cycle(alice, cluster):
    """The node registered 1g.10gb slices (a MIG profile); vision has quota for them too."""
    from tests.factories import GpuFactory, GpuModelFactory, NodeFactory, QuotaFactory

    slice_model = GpuModelFactory(name="a100-1g.10gb", memory_mb=9728, is_mig_profile=True)
    mig = NodeFactory(name="node-mig", pool=cluster["pool"])
    for i in range(7):
        GpuFactory(node=mig, index=i, model=slice_model, memory_mb=9728, uuid=f"MIG-{i}")
    QuotaFactory(team=cluster["vision"], gpu_model=slice_model, guaranteed=7, limit=7)
    anything = submit(alice, gpu_model=None, gpus=1)
    sliced = submit(alice, gpu_model="a100-1g.10gb", gpus=1)
    run_cycle()
    models = dict(Allocation.objects.values_list("job_id", "gpu__model__name"))
    assert models[sliced.pk] == "a100-1g.10gb" and models[anything.pk] != "a100-1g.10gb"
