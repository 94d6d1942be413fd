"""Scheduling policies as configuration: the default stored policy, immutable versions, validation naming the
knob and its limit, audit entries, admins only, and the live cycle scheduling with the active version."""

import dataclasses

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection

from portal.models import AuditEntry
from portal.teams.selectors import share_standing
from scheduler.core.types import Policy
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, PolicyActivation, PolicyVersion, SchedulingPolicy
from scheduler.models.policies import KNOBS
from scheduler.selectors_policies import BUILT_IN, policy_active, policy_versions_at
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from scheduler.services.policies import policy_activate, policy_create, policy_validate, policy_version_create
from tests.factories import GpuFactory, NodeFactory

pytestmark = pytest.mark.django_db


def knobs(**changes) -> dict:
    """Today's default knob values with ``changes``."""
    values = {k: getattr(Policy(), k) for k in KNOBS}
    values["las_thresholds_gpu_s"] = list(values["las_thresholds_gpu_s"])
    return values | changes


def errors_of(exc_info) -> dict:
    return {k: " ".join(v) for k, v in exc_info.value.message_dict.items()}


def test_every_knob_of_the_engines_policy_is_stored_and_none_else():
    assert set(KNOBS) == {f.name for f in dataclasses.fields(Policy)} - {"name"}


def test_the_migration_stores_todays_policy_as_rota_v1_and_activates_it():
    active = policy_active()
    assert active.label == "rota v1"
    assert active.policy == dataclasses.replace(Policy(), name="rota v1")


def test_versions_and_activations_are_immutable():
    version = PolicyVersion.objects.get(policy__name="rota", number=1)
    version.placement = "spread"
    with pytest.raises(ValidationError, match="immutable"):
        version.save()
    with pytest.raises(ValidationError, match="immutable"):
        PolicyVersion.objects.filter(pk=version.pk).update(placement="spread")
    with pytest.raises(ValidationError, match="immutable"):
        version.delete()
    with pytest.raises(ValidationError, match="immutable"):
        PolicyActivation.objects.all().delete()
    assert PolicyVersion.objects.get(pk=version.pk).placement == "binpack"


def test_the_database_refuses_to_rewrite_or_delete_policy_history_whoever_asks(staff):
    from django.db import IntegrityError, transaction

    version = PolicyVersion.objects.get(policy__name="rota", number=1)
    for sql in ("UPDATE scheduler_policyversion SET placement = 'spread'",
                "UPDATE scheduler_policyversion SET las_thresholds_gpu_s = '[1]'::jsonb",
                "DELETE FROM scheduler_policyversion",
                "UPDATE scheduler_policyactivation SET at = now() - interval '1 day'",
                "DELETE FROM scheduler_policyactivation"):
        with pytest.raises(IntegrityError, match="immutable"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    with connection.cursor() as cursor:  # the people references may be cleared (a user deleted)
        cursor.execute("UPDATE scheduler_policyversion SET created_by_id = %s", [staff.pk])
    assert PolicyVersion.objects.get(pk=version.pk).created_by == staff


@pytest.mark.parametrize("changes, field, words", [
    ({"ordering": "random"}, "ordering", "must be one of fairshare, fifo, las; got 'random'"),
    ({"placement": "scatter"}, "placement", "must be one of binpack, spread"),
    ({"fair_share_half_life_s": -5.0}, "fair_share_half_life_s", "must be from 60 s (a minute) to 3.1536e+07 s"),
    ({"fair_share_half_life_s": "soon"}, "fair_share_half_life_s", "must be a number of seconds"),
    ({"ordering": "las", "las_thresholds_gpu_s": [3600.0, 100.0]}, "las_thresholds_gpu_s",
     "strictly ascending; got 3600, 100"),
    ({"ordering": "las", "las_thresholds_gpu_s": [0.0]}, "las_thresholds_gpu_s", "above 0"),
    ({"las_thresholds_gpu_s": [3600.0]}, "las_thresholds_gpu_s", "used by ordering las only"),
    ({"ordering": "las", "las_thresholds_gpu_s": [float(i + 1) for i in range(9)]}, "las_thresholds_gpu_s",
     "at most 8 thresholds; got 9"),
    ({"preemption": False}, "reclaim", "turn preemption on, or reclaim off"),
    ({"preemption": False, "reclaim": False, "preemption_scope": "cluster"}, "preemption_scope", "needs preemption"),
    ({"backfill": "yes"}, "backfill", "must be true or false"),
])
def test_a_bad_knob_is_refused_naming_the_knob_and_its_limit(changes, field, words):
    with pytest.raises(ValidationError) as exc_info:
        policy_validate(knobs(**changes))
    assert words in errors_of(exc_info)[field]


def test_a_version_must_give_every_knob_and_no_other():
    with pytest.raises(ValidationError, match="missing: reclaim"):
        policy_validate({k: v for k, v in knobs().items() if k != "reclaim"})
    with pytest.raises(ValidationError, match="unknown knobs colour"):
        policy_validate(knobs(colour="red"))


def test_las_thresholds_may_be_typed_as_text():
    clean = policy_validate(knobs(ordering="las", las_thresholds_gpu_s="3600, 36000"))
    assert clean["las_thresholds_gpu_s"] == [3600.0, 36000.0]
    with pytest.raises(ValidationError, match="'1h' is not a number"):
        policy_validate(knobs(ordering="las", las_thresholds_gpu_s="3600, 1h"))


def test_only_platform_admins_change_policies(alice):
    rota = SchedulingPolicy.objects.get(name="rota")
    with pytest.raises(PermissionDenied):
        policy_create(user=alice, name="mine", values=knobs(), reason="x")
    with pytest.raises(PermissionDenied):
        policy_version_create(user=alice, policy=rota, values=knobs(placement="spread"), reason="x")
    with pytest.raises(PermissionDenied):
        policy_activate(user=alice, version=rota.versions.get(), reason="x")
    assert PolicyVersion.objects.count() == 1 and not AuditEntry.objects.exists()


def test_creating_editing_and_activating_is_audited_with_old_and_new_values(staff):
    draft = policy_create(user=staff, name="spread", description="spread for resilience",
                          values=knobs(placement="spread"), reason="try spreading")
    assert draft.label == "spread v1" and policy_active().label == "rota v1"  # a new policy is a draft
    created = AuditEntry.objects.get(action="policy.create")
    assert (created.object_name, created.actor_name, created.reason) == ("spread", "root", "try spreading")
    assert created.after["placement"] == "spread" and created.after["version"] == 1

    v2 = policy_version_create(user=staff, policy=draft.policy, values=knobs(placement="spread", backfill=False),
                               reason="no backfill either")
    edit = AuditEntry.objects.get(action="policy.version")
    assert edit.before == {"version": 1, "backfill": True} and edit.after == {"version": 2, "backfill": False}
    assert policy_active().label == "rota v1"  # editing a draft leaves the live cycle alone

    policy_activate(user=staff, version=v2, reason="go live")
    switch = AuditEntry.objects.get(action="policy.activate")
    assert (switch.before, switch.after, switch.reason) == ({"active": "rota v1"}, {"active": "spread v2"}, "go live")
    assert policy_active().label == "spread v2" and policy_active().policy.backfill is False
    assert policy_activate(user=staff, version=v2, reason="again") is None  # already active: nothing recorded

    v3 = policy_version_create(user=staff, policy=draft.policy, values=knobs(placement="spread"), reason="backfill")
    assert policy_active().version == v3  # an edit of the active policy goes live at once, audited as such
    assert AuditEntry.objects.filter(action="policy.activate").count() == 2
    assert list(PolicyVersion.objects.filter(policy=draft.policy).values_list("number", "backfill")) == [
        (3, True), (2, False), (1, True)]  # every version kept as it was


def test_an_edit_that_changes_nothing_and_a_duplicate_name_are_refused(staff):
    rota = SchedulingPolicy.objects.get(name="rota")
    with pytest.raises(ValidationError, match="nothing changed: rota v1 already has these values"):
        policy_version_create(user=staff, policy=rota, values=knobs(), reason="same")
    with pytest.raises(ValidationError) as exc_info:
        policy_create(user=staff, name="rota", values=knobs(), reason="")
    assert "already exists" in errors_of(exc_info)["name"] and "reason is required" in errors_of(exc_info)["reason"]
    with pytest.raises(ValidationError, match="lower-case letters"):
        policy_create(user=staff, name="Not A Slug", values=knobs(), reason="x")


def _second_h100_node(cluster):
    node = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=node, index=i, model=cluster["h100"], memory_mb=81559, uuid=f"GPU-h100-b-{i}")
    return node


def _node_of(job) -> str:
    return Allocation.objects.get(job=job, ended_at__isnull=True).node.name


def _place_two(alice, staff, placement: str) -> tuple[str, str]:
    first = job_submit(user=alice, name="a", command="true", gpu_model="h100-80gb")
    run_cycle()
    if placement == "spread":
        policy_version_create(user=staff, policy=SchedulingPolicy.objects.get(name="rota"),
                              values=knobs(placement="spread"), reason="keep nodes balanced")
    second = job_submit(user=alice, name="b", command="true", gpu_model="h100-80gb")
    report = run_cycle()
    assert report.started == 1
    assert report.policy == ("rota v2" if placement == "spread" else "rota v1")
    return _node_of(first), _node_of(second)


def test_the_live_cycle_packs_under_binpack(cluster, alice, staff):
    _second_h100_node(cluster)
    first, second = _place_two(alice, staff, "binpack")
    assert first == second


def test_the_live_cycle_spreads_once_the_active_policy_says_spread(cluster, alice, staff):
    _second_h100_node(cluster)
    first, second = _place_two(alice, staff, "spread")
    assert first != second


def test_the_version_active_at_a_decision_is_the_one_that_made_it(cluster, alice, staff):
    first = job_submit(user=alice, name="a", command="true", gpu_model="h100-80gb")
    run_cycle()
    v2 = policy_version_create(user=staff, policy=SchedulingPolicy.objects.get(name="rota"),
                               values=knobs(backfill=False), reason="no backfill")
    second = job_submit(user=alice, name="b", command="true", gpu_model="h100-80gb")
    run_cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    before, after = policy_versions_at([first.admitted_at, second.admitted_at])
    assert (before.label, after) == ("rota v1", v2)


def test_the_fair_share_standing_decays_with_the_active_half_life(cluster, staff):
    policy_version_create(user=staff, policy=SchedulingPolicy.objects.get(name="rota"),
                          values=knobs(fair_share_half_life_s=3600.0), reason="short memory")
    assert share_standing(team=cluster["vision"], now=db_now()).half_life_s == 3600.0


def test_without_any_activation_the_engine_falls_back_to_its_built_in_policy(cluster, alice):
    with connection.cursor() as cursor:  # as a database emptied by hand would be
        cursor.execute("TRUNCATE scheduler_policyactivation")  # a DELETE is refused (the history is immutable)
    assert policy_active().label == BUILT_IN and policy_active().policy == Policy()
    job_submit(user=alice, name="a", command="true", gpu_model="h100-80gb")
    assert run_cycle().policy == BUILT_IN


def test_the_job_page_names_the_policy_version_of_each_decision(cluster, alice, staff):
    from django.test import Client

    admitted = job_submit(user=alice, name="a", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    policy_version_create(user=staff, policy=SchedulingPolicy.objects.get(name="rota"),
                          values=knobs(placement="spread"), reason="spread")
    waiting = job_submit(user=alice, name="b", command="true", gpu_model="h100-80gb")  # over vision's limit of 4
    run_cycle()
    client = Client()
    client.force_login(alice)
    page = client.get(f"/jobs/{admitted.pk}/").content.decode()
    assert "admitted by the scheduler" in page and "· policy rota v1</small>" in page
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "QuotaExceeded" in page and "judged by the last cycle under policy rota v2" in page


@pytest.mark.django_db(transaction=True)
def test_an_activation_waits_for_a_running_cycle_so_it_never_lands_inside_one(staff):
    """The version active at a decision's time is the one that made it: an activation is stamped only after the
    cycle holding the lock has ended, never between a cycle's start and its commit."""
    import threading

    from django.db import transaction

    from portal import locks

    draft = policy_create(user=staff, name="spread", values=knobs(placement="spread"), reason="draft")
    done = []

    def activate():
        try:
            done.append(policy_activate(user=staff, version=draft, reason="go"))
        finally:
            connection.close()

    with transaction.atomic():  # a cycle in progress
        assert locks.try_xact_lock(locks.SCHEDULING_CYCLE)
        activator = threading.Thread(target=activate)
        activator.start()
        with connection.cursor() as cursor:
            for _ in range(200):  # until the activation waits on the cycle's lock
                cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                               "AND objid = %s", [locks.SCHEDULING_CYCLE])
                if cursor.fetchone()[0]:
                    break
                activator.join(0.05)
            else:
                pytest.fail("the activation did not wait for the cycle's lock")
        assert not PolicyActivation.objects.filter(version=draft).exists() and not done
        cycle_end = db_now()
    activator.join(10)
    assert done and done[0].at > cycle_end and policy_active().version == draft
