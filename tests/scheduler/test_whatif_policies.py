"""What-if replays compare two stored policy versions: the active one against a draft, by default the active
one for both; the run names both and its figures differ where the policies do."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from scheduler.models import PolicyVersion, PriorityClass, WhatIfRun
from scheduler.services.policies import policy_create
from scheduler.whatif import whatif_create, whatif_execute
from tests.scheduler.test_policies import knobs
from tests.scheduler.test_whatif import quota_bound_history  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


def period(t0):
    return {"period_start": t0 - timedelta(hours=1), "period_end": t0 + timedelta(hours=4)}


def test_a_replay_compares_the_active_policy_with_a_draft(admin_user, admin_client, quota_bound_history):  # noqa: F811
    draft = policy_create(user=admin_user, name="no-borrowing", values=knobs(borrowing=False),
                          reason="what if nobody borrowed")
    run = whatif_create(user=admin_user, name="borrowing or not", changed_policy=draft.pk,
                        **period(quota_bound_history))
    assert run.baseline_policy.label == "rota v1" and run.policies_shown == "rota v1 → no-borrowing v1"
    run = whatif_execute(run.pk)
    assert run.state == WhatIfRun.DONE
    assert run.result["policies"] == {"baseline": "rota v1", "changed": "no-borrowing v1"}
    baseline, changed = run.result["baseline"]["vision"], run.result["changed"]["vision"]
    # Vision is guaranteed 2 of the node's 4 GPUs with a limit of 4: borrowing runs four at once, not two.
    assert changed["avg_wait_s"] > baseline["avg_wait_s"] + 1800
    assert run.result["summary"]["changed"]["quota_violations"] == 0
    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    assert '<small id="baseline-policy">rota v1</small>' in page
    assert '<small id="changed-policy">no-borrowing v1</small>' in page


def test_by_default_both_replays_run_under_the_active_version(admin_user, quota_bound_history):  # noqa: F811
    run = whatif_create(user=admin_user, name="same", **period(quota_bound_history))
    active = PolicyVersion.objects.get(policy__name="rota", number=1)
    assert (run.baseline_policy, run.changed_policy, run.policies_shown) == (active, active, "rota v1")
    run = whatif_execute(run.pk)
    assert run.result["baseline"]["vision"] == run.result["changed"]["vision"]


def test_an_unknown_version_is_named_and_nothing_is_queued(admin_user, cluster):
    from scheduler.services.common import db_now

    now = db_now()
    with pytest.raises(ValidationError) as info:
        whatif_create(user=admin_user, name="x", period_start=now - timedelta(days=1), period_end=now,
                      baseline_policy=999_999)
    assert "no stored policy version has id 999999" in info.value.message_dict["baseline_policy"][0]
    with pytest.raises(ValidationError, match="not both"):
        whatif_create(user=admin_user, name="x", period_start=now - timedelta(days=1), period_end=now,
                      policy="fifo", changed_policy=1)
    assert not WhatIfRun.objects.exists()


def test_the_what_if_page_offers_every_stored_version_and_queues_the_pair(admin_client, admin_user, cluster):
    draft = policy_create(user=admin_user, name="spread", values=knobs(placement="spread"), reason="draft")
    active = PolicyVersion.objects.get(policy__name="rota")
    page = admin_client.get("/whatif/").content.decode()
    assert f'<option value="{active.pk}" selected>rota v1 (active)</option>' in page
    assert f'<option value="{draft.pk}">spread v1</option>' in page
    from scheduler.services.common import db_now

    start = (db_now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    end = (db_now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = admin_client.post("/whatif/", {"name": "spread?", "period_start": start, "period_end": end,
                                              "baseline_policy": active.pk, "changed_policy": draft.pk,
                                              "s:train": "1.0", **{f"p:{name}": value for name, value in
                                                                   PriorityClass.objects.values_list("name", "value")}})
    assert response.status_code == 302, response.content.decode()[-2000:]
    run = WhatIfRun.objects.get()
    assert (run.baseline_policy, run.changed_policy) == (active, draft)
    assert "rota v1 → spread v1" in admin_client.get("/whatif/").content.decode()
