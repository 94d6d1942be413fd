"""Shared fixtures: the alice / bob / charlie trio (owner, team-mate, outsider), a small cluster, API clients."""

import pytest
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from portal.models import Membership
from scheduler.models import Node, NodeToken
from tests.factories import (
    GpuFactory,
    GpuModelFactory,
    MembershipFactory,
    NodeFactory,
    PoolFactory,
    PriorityClassFactory,
    QuotaFactory,
    TeamFactory,
    UserFactory,
)

pytest_plugins = ["tests.processes"]

# Property tests check what is computed, not how fast: Hypothesis's default 200 ms deadline per example fails
# them on a shared, loaded 2-core box (DeadlineExceeded, then "Flaky") though every example holds.
hypothesis_settings.register_profile("rota", deadline=None)
hypothesis_settings.load_profile("rota")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _wakeups_sent_on_commit(settings):
    """In-process tests read Redis right after a commit: the committing thread sends its wake-ups itself
    (tests/scheduler/test_wake_sender.py and the e2e tests run the sender thread)."""
    settings.ROTA_WAKE_IN_BACKGROUND = False


@pytest.fixture(autouse=True)
def _fresh_throttles():
    """Each test starts with no request history (throttles count in the cache, which outlives a test)."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def cluster(db):
    """Two teams (vision, nlp) sharing pool ``train``: one node of 4×h100-80gb and one of 2×a100-40gb,
    priority classes, quotas (vision: 2 guaranteed / 4 limit on h100; nlp: 1 / 2)."""
    vision, nlp = TeamFactory(name="vision"), TeamFactory(name="nlp")
    pool = PoolFactory(name="train")
    pool.teams.add(vision, nlp)
    h100 = GpuModelFactory(name="h100-80gb", memory_mb=81559)
    a100 = GpuModelFactory(name="a100-40gb", memory_mb=40960)
    for name, value, preemptible in [("production-inference", 1000, False), ("interactive", 800, False),
                                     ("training", 500, True), ("batch", 300, True)]:
        PriorityClassFactory(name=name, value=value, preemptible=preemptible)
    n1 = NodeFactory(name="node-h100", pool=pool)
    for i in range(4):
        GpuFactory(node=n1, index=i, model=h100, memory_mb=81559, uuid=f"GPU-h100-{i}")
    n2 = NodeFactory(name="node-a100", pool=pool)
    for i in range(2):
        GpuFactory(node=n2, index=i, model=a100, memory_mb=40960, uuid=f"GPU-a100-{i}")
    QuotaFactory(team=vision, gpu_model=h100, guaranteed=2, limit=4)
    QuotaFactory(team=nlp, gpu_model=h100, guaranteed=1, limit=2)
    QuotaFactory(team=vision, gpu_model=a100, guaranteed=1, limit=2)
    return {"vision": vision, "nlp": nlp, "pool": pool, "h100": h100, "a100": a100, "nodes": [n1, n2]}


@pytest.fixture
def alice(cluster):
    """A member of vision: submits jobs."""
    user = UserFactory(username="alice")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.MEMBER)
    return user


@pytest.fixture
def bob(cluster):
    """Another member of vision: sees alice's jobs but may not cancel them."""
    user = UserFactory(username="bob")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.MEMBER)
    return user


@pytest.fixture
def charlie(cluster):
    """A member of nlp: an outsider to vision's jobs."""
    user = UserFactory(username="charlie")
    MembershipFactory(user=user, team=cluster["nlp"], role=Membership.MEMBER)
    return user


@pytest.fixture
def staff(cluster):
    """A platform admin (staff): governs quotas, priority classes, pools, nodes and the queue."""
    return UserFactory(username="root", is_staff=True)


@pytest.fixture
def api():
    def make(user=None):
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def node_client(cluster):
    """An API client authenticated as node ``node-h100`` with its own token."""

    def make(node: Node | None = None):
        node = node or cluster["nodes"][0]
        _, raw = NodeToken.issue(node)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
        return client

    return make
