"""The inventory's history, as the usage rollup records it, and idle cost and fairness counting each GPU only
from when it existed: the cluster of these tests registered on November 20th at noon, 252 hours before December."""

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape

import pytest

from accounting.models import GpuPresence
from accounting.selectors_fairness import capacity_over
from accounting.services import usage_rollup
from accounting.services_billing import rate_card_create
from scheduler.models import Gpu, Node
from scheduler.services.common import db_now
from tests.accounting.helpers import allocate, make_job
from tests.accounting.test_api_chargeback import fetch
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
REGISTERED = datetime(2026, 11, 20, 12, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
H = timedelta(hours=1)
H100_REPORT = {
    "gpu_backend": "fake",
    "gpus": [{"index": i, "uuid": f"GPU-h100-{i}", "model": "h100-80gb", "memory_mb": 81559} for i in range(4)],
}


@pytest.fixture
def root():
    return UserFactory(username="root", is_staff=True)


@pytest.fixture
def registered(cluster):
    """Prices, and both nodes registered at ``REGISTERED`` (their GPUs were never there before)."""
    rate_card_create(
        version=1,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        prices={"h100-80gb": Decimal("4.00"), "a100-40gb": Decimal("2.50")},
    )
    Node.objects.update(registered_at=REGISTERED)
    usage_rollup(until=DEC)
    return cluster


def stretches(**filters):
    return sorted(
        GpuPresence.objects.filter(**filters).values_list("gpu__uuid", "gpu_model__name", "since", "until"),
        key=lambda r: (r[0] or "", r[2]),
    )


def idle_rows(client, month):
    _, body = fetch(client, month=month, format="csv")
    rows = csv.DictReader(io.StringIO(body.decode()))
    return [(r["gpu_model"], r["gpus"], r["allocated_gpu_hours"], r["cost"]) for r in rows if r["kind"] == "idle"]


def test_the_rollup_records_each_gpu_from_its_nodes_registration(registered):
    assert len(stretches()) == 6
    assert {(since, until) for _, _, since, until in stretches()} == {(REGISTERED, None)}
    assert usage_rollup(until=DEC).presence_changes == 0  # nothing changed: nothing recorded twice


def test_idle_cost_counts_each_gpu_only_since_it_existed(api, root, registered):
    assert idle_rows(api(root), "2026-11") == [
        ("a100-40gb", "2", "504.000000", "1260.00"),  # 2 GPUs × 252 h × 2.50
        ("h100-80gb", "4", "1008.000000", "4032.00"),  # 4 GPUs × 252 h × 4.00
    ]
    assert idle_rows(api(root), "2026-10") == []  # the cluster did not exist yet


def test_a_running_month_counts_capacity_up_to_now_and_not_before_the_registration(api, root, cluster):
    now = db_now()
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    since = max(now - timedelta(minutes=8), month_start)  # "nodes registered minutes ago"
    Node.objects.update(registered_at=since)
    usage_rollup()
    rows = idle_rows(api(root), now.strftime("%Y-%m"))
    elapsed_h = (db_now() - since).total_seconds() / 3600
    hours = {model: float(h) for model, _, h, _ in rows}
    assert set(hours) == {"a100-40gb", "h100-80gb"}
    assert (now - since).total_seconds() / 3600 * 4 <= hours["h100-80gb"] <= elapsed_h * 4


def test_capacity_is_allocated_plus_idle_on_the_dashboard(client, root, alice, registered):
    job = make_job(alice, registered["vision"])
    allocate(job, "GPU-h100-0", REGISTERED + H, REGISTERED + 11 * H)
    usage_rollup(until=DEC, full=True)  # a backdated allocation: a repair run picks it up
    client.force_login(root)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"}).content.decode()
    idle = html.split('id="idle"')[1].split("</section>")[0]
    assert '<td>h100-80gb</td><td class="num">4</td><td class="num">1008.0</td><td class="num">998.0</td>' in idle
    assert "5252.00" in html  # 998 × 4.00 + 504 × 2.50: the idle tile
    assert "1502.0 idle GPU-hours" in html
    assert "never before it existed" in idle


def test_entitlements_count_only_the_hours_the_gpus_existed(api, alice, registered):
    [vision] = api(alice).get("/api/v1/reports/fairness/", {"month": "2026-11"}).json()["results"]
    h100 = next(ln for ln in vision["lines"] if ln["gpu_model"] == "h100-80gb")
    assert (h100["capacity"], h100["entitled_gpus"], h100["hours"]) == (4, 2.5, 252)
    assert h100["entitled_gpu_hours"] == 630  # 2.5 GPUs × 252 h, not × 720 h
    assert vision["hours"] == 720 and vision["guaranteed"] == 3


def test_an_agent_restart_keeps_the_history(cluster, node_client):
    Node.objects.update(registered_at=REGISTERED)
    usage_rollup(until=DEC)
    node_client().post("/api/v1/node/register/", H100_REPORT, format="json")  # the agent restarts: re-registers
    usage_rollup()
    assert {since for _, _, since, _ in stretches()} == {REGISTERED}
    assert not GpuPresence.objects.exclude(until=None).exists()


def test_a_gpu_gone_at_a_registration_counts_until_that_registration(cluster, node_client):
    Node.objects.update(registered_at=REGISTERED)
    usage_rollup(until=DEC)
    report = {**H100_REPORT, "gpus": H100_REPORT["gpus"][:3]}
    node_client().post("/api/v1/node/register/", report, format="json")
    gone_at = Node.objects.get(name="node-h100").registered_at
    usage_rollup()
    assert stretches(gpu__uuid="GPU-h100-3") == [("GPU-h100-3", "h100-80gb", REGISTERED, gone_at)]
    steps = capacity_over(start=REGISTERED, end=gone_at + H)
    assert [gpus["h100-80gb"] for _, _, gpus in steps] == [4, 3]


def test_a_card_replaced_by_another_model_closes_one_stretch_and_opens_another(cluster, node_client):
    Node.objects.update(registered_at=REGISTERED)
    usage_rollup(until=DEC)
    swapped = {"index": 3, "uuid": "GPU-h200-0", "model": "h200-141gb", "memory_mb": 143771}
    node_client().post(
        "/api/v1/node/register/", {**H100_REPORT, "gpus": [*H100_REPORT["gpus"][:3], swapped]}, format="json"
    )
    at = Node.objects.get(name="node-h100").registered_at
    usage_rollup()
    row = Gpu.objects.get(uuid="GPU-h200-0")
    assert stretches(gpu=row) == [("GPU-h200-0", "h100-80gb", REGISTERED, at), ("GPU-h200-0", "h200-141gb", at, None)]


def test_a_deleted_gpu_keeps_its_past(cluster):
    Node.objects.update(registered_at=REGISTERED)
    usage_rollup(until=DEC)
    Gpu.objects.filter(uuid="GPU-a100-1").delete()
    usage_rollup()
    [(gpu, model, since, until)] = [r for r in stretches() if r[0] is None]
    assert (model, since) == ("a100-40gb", REGISTERED) and until is not None


def test_gpus_there_before_the_history_began_count_from_their_first_allocation(alice, cluster):
    """A cluster upgraded to the recorded history: the node re-registered after the GPU's first job."""
    Node.objects.update(registered_at=REGISTERED)
    allocate(make_job(alice, cluster["vision"]), "GPU-h100-2", REGISTERED - 48 * H, REGISTERED - 47 * H)
    usage_rollup(until=DEC)
    assert [since for uuid, _, since, _ in stretches() if uuid == "GPU-h100-2"] == [REGISTERED - 48 * H]


def test_the_fairness_chart_and_tables_agree(client, alice, registered):
    client.force_login(alice)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"}).content.decode()
    fig = json.loads(unescape(re.search(r'id="fig-fairness" type="application/json">(.*?)</script>', html).group(1)))
    [entitled, _received] = fig["data"]
    assert entitled["customdata"] == ["1134.0"]  # 630 on h100 + 2 × 252 on a100
    assert '<td>vision</td><td class="num">1134.0</td>' in html
