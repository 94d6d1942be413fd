"""The Django admin cannot change what the audited governance services own (quotas, priority classes,
pool access, node state, GPU health, memberships) nor what the scheduler owns (jobs, allocations)."""

import pytest

from scheduler.models import PriorityClass, Quota
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client, cluster):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_quotas_and_priority_classes_are_view_only(root, cluster):
    quota = Quota.objects.first()
    assert root.get(f"/admin/scheduler/quota/{quota.pk}/change/").status_code == 200  # still viewable
    before = (quota.guaranteed, quota.limit)
    response = root.post(f"/admin/scheduler/quota/{quota.pk}/change/",
                         {"team": quota.team_id, "gpu_model": quota.gpu_model_id, "guaranteed": "999",
                          "limit": "999", "weight": "1", "non_lendable": "0"})
    assert response.status_code == 403
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == before
    assert root.get("/admin/scheduler/quota/add/").status_code == 403
    pc = PriorityClass.objects.first()
    assert root.post(f"/admin/scheduler/priorityclass/{pc.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PriorityClass.objects.filter(pk=pc.pk).exists()
    for model in ("job", "allocation"):
        assert root.get(f"/admin/scheduler/{model}/add/").status_code == 403


def test_pool_access_and_node_state_are_shown_not_edited(root, cluster):
    from scheduler.models import Node, Pool

    pool = Pool.objects.first()
    page = root.get(f"/admin/scheduler/pool/{pool.pk}/change/").content.decode()
    assert 'name="teams"' not in page
    node = Node.objects.first()
    page = root.get(f"/admin/scheduler/node/{node.pk}/change/").content.decode()
    assert 'name="state"' not in page and 'name="gpus-0-healthy"' not in page
