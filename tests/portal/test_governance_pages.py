"""Governance pages: staff only (members and outsiders get 404), validation inline, preview, audit, stale
edits refused, drain/resume with a reason, pools, priority classes, the audit log and its CSV export."""

import csv
import html
import io
import re
from decimal import Decimal

import pytest
from django.test import Client

from portal.audit import audit_record
from portal.models import AuditEntry
from scheduler.models import Node, PriorityClass, Quota
from tests.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGES = ["/govern/", "/govern/quotas/", "/govern/priority-classes/", "/govern/priority-classes/new/",
         "/govern/priority-classes/training/", "/govern/pools/", "/govern/nodes/", "/govern/budgets/",
         "/govern/budgets/new/", "/govern/audit/", "/govern/images/",
         "/govern/audit/?format=csv"]
POSTS = ["/govern/quotas/", "/govern/pools/train/teams/", "/govern/nodes/node-h100/drain/",
         "/govern/nodes/node-h100/resume/", "/govern/priority-classes/new/", "/govern/budgets/new/",
         "/govern/images/pools/train/", "/govern/images/kinds/training/"]


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def matrix_post(cluster, **cells):
    """POST data for the quota matrix as it stands, with ``cells`` (key 'team/model' -> (g, l, w)) changed."""
    data = {"action": "save", "reason": "rebalance"}
    for q in Quota.objects.select_related("team", "gpu_model"):
        key = f"q:{q.team.name}:{q.gpu_model.name}"
        data |= {f"{key}:guaranteed": str(q.guaranteed), f"{key}:limit": "" if q.limit is None else str(q.limit),
                 f"{key}:weight": str(q.weight), f"{key}:updated_at": q.updated_at.isoformat()}
    for key, (g, lim, w) in cells.items():
        team, model = key.split("/")
        data |= {f"q:{team}:{model}:guaranteed": g, f"q:{team}:{model}:limit": lim, f"q:{team}:{model}:weight": w}
    return data


def invalid_inputs(page: str) -> set[str]:
    """The names of the inputs a page outlines as invalid."""
    return set(re.findall(r'<input[^>]*\bname="([^"]+)"[^>]*\baria-invalid="true"', page))


@pytest.mark.parametrize("url", PAGES)
def test_it_shows_every_governance_page_to_staff(staff, url):
    response = client_for(staff).get(url, follow=True)
    assert response.status_code == 200


@pytest.mark.parametrize("url", PAGES)
def test_it_hides_every_governance_page_from_members_with_404(alice, url):
    assert client_for(alice).get(url).status_code == 404


@pytest.mark.parametrize("url", POSTS)
def test_it_refuses_governance_writes_from_members_with_404(alice, url):
    assert client_for(alice).post(url, {"reason": "x", "name": "evil", "value": 1}).status_code == 404
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("url", PAGES + POSTS)
def test_it_sends_anonymous_visitors_to_sign_in(cluster, url):
    response = client_for().get(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_govern_link_is_in_the_nav_for_staff_only(staff, alice):
    assert 'href="/govern/"' in client_for(staff).get("/").content.decode()
    assert 'href="/govern/"' not in client_for(alice).get("/").content.decode()


def test_the_quota_matrix_shows_teams_models_values_and_usage(staff):
    page = client_for(staff).get("/govern/quotas/").content.decode()
    assert 'name="q:vision:h100-80gb:guaranteed" value="2"' in page
    assert 'name="q:vision:h100-80gb:limit" value="4"' in page
    assert 'name="q:nlp:a100-40gb:guaranteed" value=""' in page
    assert "in use 0" in page


def test_it_saves_a_quota_change_and_records_before_and_after(staff, cluster):
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"vision/h100-80gb": ("3", "6", "2")}))
    assert response.status_code == 302
    q = Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"])
    assert (q.guaranteed, q.limit, q.weight) == (3, 6, 2)
    entry = AuditEntry.objects.get()
    assert entry.actor == staff and entry.actor_name == "root"
    assert entry.action == "quota.update" and entry.object_type == "quota" and entry.object_name == "vision/h100-80gb"
    assert entry.before == {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": "2", "limit": "4",
                            "weight": "1"}
    assert entry.after == {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": "3", "limit": "6",
                           "weight": "2"}
    assert entry.reason == "rebalance"


def test_it_creates_a_quota_in_an_empty_cell(staff, cluster):
    data = matrix_post(cluster) | {"q:nlp:a100-40gb:guaranteed": "1", "q:nlp:a100-40gb:limit": "2"}
    assert client_for(staff).post("/govern/quotas/", data).status_code == 302
    q = Quota.objects.get(team=cluster["nlp"], gpu_model=cluster["a100"])
    assert (q.guaranteed, q.limit, q.weight) == (1, 2, 1)
    entry = AuditEntry.objects.get()
    assert entry.action == "quota.create" and entry.before is None


def test_emptying_a_quota_cell_is_refused_with_how_to_take_access_away(staff, cluster):
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"nlp/h100-80gb": ("", "", "")}))
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "nlp/h100-80gb: an emptied cell would mean guaranteed 0 and no cap" in page
    assert "set its limit to 0" in page and invalid_inputs(page) == {"q:nlp:h100-80gb:limit"}
    q = Quota.objects.get(team=cluster["nlp"], gpu_model=cluster["h100"])
    assert (q.guaranteed, q.limit) == (1, 2) and not AuditEntry.objects.exists()
    zero = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"nlp/h100-80gb": ("0", "0", "1")}))
    assert zero.status_code == 302 and Quota.objects.get(team=cluster["nlp"], gpu_model=cluster["h100"]).limit == 0


def test_it_refuses_a_guarantee_above_the_limit_naming_the_cell_and_outlining_the_guarantee(staff, cluster):
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"nlp/h100-80gb": ("3", "2", "1")}))
    assert response.status_code == 400
    page = response.content.decode()
    assert "nlp/h100-80gb: guaranteed 3 is above the limit 2" in page
    assert invalid_inputs(page) == {"q:nlp:h100-80gb:guaranteed"}  # the guarantee changed, not the limit
    q = Quota.objects.get(team=cluster["nlp"], gpu_model=cluster["h100"])
    assert (q.guaranteed, q.limit) == (1, 2) and not AuditEntry.objects.exists()


def test_it_refuses_a_limit_lowered_below_the_guarantee_outlining_the_limit(staff, cluster):
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"nlp/h100-80gb": ("1", "0.5", "1")}))
    assert response.status_code == 400
    page = response.content.decode()
    assert "nlp/h100-80gb: limit 0.5 is below the guaranteed 1" in page
    assert invalid_inputs(page) == {"q:nlp:h100-80gb:limit"}


@pytest.mark.parametrize(("values", "message"), [
    (("abc", "4", "1"), "guaranteed must be a number"),
    (("2", "4", "0"), "weight must be above 0"),
    (("-1", "4", "1"), "guaranteed must be between 0"),
    (("NaN", "4", "1"), "guaranteed must be a number"),
])
def test_it_explains_bad_quota_values(staff, cluster, values, message):
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"vision/h100-80gb": values}))
    assert response.status_code == 400
    assert message in response.content.decode()


def test_it_keeps_childrens_guarantees_within_the_parents(staff, cluster):
    dept = TeamFactory(name="research")
    Quota.objects.create(team=dept, gpu_model=cluster["h100"], guaranteed=3, limit=4)
    cluster["vision"].parent = dept
    cluster["vision"].save()
    cluster["nlp"].parent = dept
    cluster["nlp"].save()
    response = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"nlp/h100-80gb": ("2", "2", "1")}))
    assert response.status_code == 400
    assert "the children of research would be guaranteed 4 GPUs in total, more than research's 3" in (
        html.unescape(response.content.decode()))
    assert invalid_inputs(response.content.decode()) == {"q:nlp:h100-80gb:guaranteed"}  # what changed, not research
    ok = client_for(staff).post("/govern/quotas/", matrix_post(cluster, **{"research/h100-80gb": ("4", "4", "1"),
                                                                             "nlp/h100-80gb": ("2", "2", "1")}))
    assert ok.status_code == 302


def test_the_preview_shows_the_impact_without_saving(staff, cluster, alice):
    from scheduler.models import Allocation, Job
    from scheduler.services.jobs import job_submit

    job = job_submit(user=alice, name="big", command="true", gpus=3, gpu_model="h100-80gb")
    Job.objects.filter(pk=job.pk).update(state="running")
    now = job.created_at
    for gpu in cluster["nodes"][0].gpus.all()[:3]:
        Allocation.objects.create(job=job, attempt=1, gpu=gpu, node=gpu.node, started_at=now)
    data = matrix_post(cluster, **{"vision/h100-80gb": ("1", "2", "1")}) | {"action": "preview"}
    response = client_for(staff).post("/govern/quotas/", data)
    page = response.content.decode()
    assert response.status_code == 200
    assert "holds 1 GPU(s) over the new limit" in page and 'value="save"' in page
    assert Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"]).limit == 4


def test_the_preview_warns_when_guarantees_outgrow_the_cluster(staff, cluster):
    """4 healthy H100s; nlp keeps its guarantee of 1, so vision's 2 → 5 makes 6 promised."""
    fits = matrix_post(cluster, **{"vision/h100-80gb": ("3", "4", "1")}) | {"action": "preview"}
    assert "not every guarantee can be met" not in client_for(staff).post("/govern/quotas/", fits).content.decode()
    data = matrix_post(cluster, **{"vision/h100-80gb": ("5", "6", "1")}) | {"action": "preview"}
    page = client_for(staff).post("/govern/quotas/", data).content.decode()
    assert ("h100-80gb: the top-level teams&#x27; guarantees add up to 6 GPUs, but the cluster has 4 healthy ones, "
            "so not every guarantee can be met at once") in page
    assert 'value="save"' in page  # a warning, not a refusal


def test_a_stale_quota_edit_is_refused_not_silently_overwritten(staff, cluster):
    data = matrix_post(cluster, **{"vision/h100-80gb": ("3", "6", "1")})
    q = Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"])
    q.limit = Decimal(5)
    q.save()  # someone else's edit after the form was read
    response = client_for(staff).post("/govern/quotas/", data)
    assert response.status_code == 409
    assert "changed by someone else since you opened it: vision/h100-80gb" in response.content.decode()
    q.refresh_from_db()
    assert (q.guaranteed, q.limit) == (2, 5)
    assert not AuditEntry.objects.exists()


def test_an_unchanged_matrix_saves_nothing(staff, cluster):
    assert client_for(staff).post("/govern/quotas/", matrix_post(cluster)).status_code == 302
    assert not AuditEntry.objects.exists()


def test_it_drains_and_resumes_a_node_with_a_reason_and_audits_it(staff, cluster):
    client = client_for(staff)
    assert client.post("/govern/nodes/node-h100/drain/", {"reason": "ECC errors on gpu 2"}).status_code == 302
    node = Node.objects.get(name="node-h100")
    assert node.state == Node.DRAINING and node.state_reason == "ECC errors on gpu 2"
    assert node.state_changed_by == staff
    assert client.post("/govern/nodes/node-h100/resume/", {"reason": "card replaced"}).status_code == 302
    node.refresh_from_db()
    assert node.state == Node.READY
    drain, resume = AuditEntry.objects.order_by("id")
    assert drain.action == "node.drain" and drain.before["state"] == "ready" and drain.after["state"] == "draining"
    assert drain.reason == "ECC errors on gpu 2"
    assert resume.action == "node.resume" and resume.after == {"state": "ready", "state_reason": "card replaced"}


def test_draining_without_a_reason_is_refused(staff, cluster):
    response = client_for(staff).post("/govern/nodes/node-h100/drain/", {"reason": "  "})
    assert response.status_code == 400
    assert "a reason is required" in response.content.decode()
    assert Node.objects.get(name="node-h100").state == Node.READY and not AuditEntry.objects.exists()


def test_it_sets_the_teams_of_a_pool_and_audits_it(staff, cluster):
    response = client_for(staff).post("/govern/pools/train/teams/",
                                      {"train-teams": [cluster["vision"].pk], "train-reason": "nlp moves out"})
    assert response.status_code == 302
    assert list(cluster["pool"].teams.values_list("name", flat=True)) == ["vision"]
    entry = AuditEntry.objects.get()
    assert entry.before == {"teams": ["nlp", "vision"]} and entry.after == {"teams": ["vision"]}
    assert entry.reason == "nlp moves out"


def test_it_creates_and_edits_priority_classes_with_unique_values(staff, cluster):
    client = client_for(staff)
    form = {"name": "urgent", "value": 900, "description": "on-call", "preemptible": "", "may_preempt": "on",
            "min_runtime_s": 0, "grace_period_s": 30, "reason": "incident work"}
    assert client.post("/govern/priority-classes/new/", form).status_code == 302
    assert PriorityClass.objects.get(name="urgent").value == 900
    clash = client.post("/govern/priority-classes/new/", form | {"name": "other"})
    assert clash.status_code == 400 and "value 900 is already used by urgent" in clash.content.decode()
    edit = client.post("/govern/priority-classes/urgent/", form | {"value": 950, "name": "renamed"})
    assert edit.status_code == 302
    pc = PriorityClass.objects.get(name="urgent")  # the name cannot change
    assert pc.value == 950
    create, update = AuditEntry.objects.filter(object_type="priority-class").order_by("id")
    assert create.before is None and create.after["value"] == 900
    assert update.before["value"] == 900 and update.after["value"] == 950


def test_the_priority_class_form_says_its_units_and_is_a_plain_card(staff, cluster):
    page = client_for(staff).get("/govern/priority-classes/new/").content.decode()
    assert '<label for="id_min_runtime_s">Minimum runtime (seconds)</label>' in page
    assert '<label for="id_grace_period_s">Grace period (seconds)</label>' in page
    assert "runs at least this long before it may be preempted" in page
    assert "from SIGTERM to SIGKILL" in page
    assert "Min runtime s" not in page and "Grace period s" not in page
    assert '<h2 id="edit-form-h">New priority class</h2>' in page
    assert '<a href="/govern/priority-classes/">Cancel' in page
    edit = client_for(staff).get("/govern/priority-classes/training/").content.decode()
    assert '<h2 id="edit-form-h">Edit priority class training</h2>' in edit
    form = re.search(r'<form method="post" class="([^"]*)"', page).group(1).split()
    assert form == ["card", "form"]  # not "narrow": that is the sign-in page's centred box
    assert page.index("<form method=\"post\"") < page.index("New priority class</h2>")  # the heading is in the card


def test_the_quota_matrix_lists_teams_as_a_tree(staff, cluster):
    research = TeamFactory(name="research")
    for child in (cluster["vision"], cluster["nlp"]):
        child.parent = research
        child.save()
    TeamFactory(name="applied", parent=TeamFactory(name="ops"))
    TeamFactory(name="zeta")
    page = client_for(staff).get("/govern/quotas/").content.decode()
    rows = [re.sub(r"<[^>]+>|\s+", " ", row).split()[-1]
            for row in re.findall(r'<th scope="row">(.*?)</th>', page)]
    assert rows == ["ops", "applied", "research", "nlp", "vision", "zeta"]


def test_the_audit_log_filters_by_object_type_and_user(staff, cluster):
    other = UserFactory(username="ops", is_staff=True)
    audit_record(actor=staff, action="node.drain", object_type="node", object_name="node-h100", reason="r1")
    audit_record(actor=other, action="quota.update", object_type="quota", object_name="vision/h100-80gb")
    client = client_for(staff)
    page = client.get("/govern/audit/?object_type=node").content.decode()
    assert "node-h100" in page and "vision/h100-80gb" not in page
    page = client.get("/govern/audit/?actor=ops").content.decode()
    assert "vision/h100-80gb" in page and "node-h100" not in page


def test_the_audit_csv_neutralizes_formulas(staff, cluster):
    audit_record(actor=staff, action="node.drain", object_type="node", object_name="node-h100",
                 reason='=HYPERLINK("http://evil","x")', after={"state": "draining"})
    audit_record(actor=staff, action="node.drain", object_type="node", object_name="node-a100", reason="+1-2")
    audit_record(actor=staff, action="node.drain", object_type="node", object_name="@SUM(A1)", reason="-3")
    response = client_for(staff).get("/govern/audit/?format=csv&object_type=node")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 3
    reasons = {r["object_name"]: r["reason"] for r in rows}
    assert reasons["node-h100"] == "'=HYPERLINK(\"http://evil\",\"x\")"
    assert reasons["node-a100"] == "'+1-2"
    assert reasons["'@SUM(A1)"] == "'-3"
    assert all(r["actor"] == "root" for r in rows)


def test_job_names_and_reasons_are_escaped_on_governance_pages(staff, cluster):
    audit_record(actor=staff, action="node.drain", object_type="node", object_name="n",
                 reason="<script>alert(1)</script>")
    page = client_for(staff).get("/govern/audit/").content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


@pytest.mark.parametrize("url", ["/govern/quotas/", "/govern/nodes/", "/govern/pools/", "/govern/audit/"])
def test_governance_lists_use_a_fixed_number_of_queries(staff, cluster, url, django_assert_max_num_queries):
    for i in range(5):
        TeamFactory(name=f"extra{i}")
        audit_record(actor=staff, action="node.drain", object_type="node", object_name=f"n{i}")
    client = client_for(staff)
    with django_assert_max_num_queries(12):
        assert client.get(url).status_code == 200


def test_pool_access_and_priority_class_changes_need_a_reason_and_save_nothing_without_one(staff, cluster):
    client = client_for(staff)
    response = client.post("/govern/pools/train/teams/", {"train-teams": [cluster["vision"].pk], "train-reason": " "})
    page = response.content.decode()
    assert response.status_code == 400 and "a reason is required" in page
    assert sorted(cluster["pool"].teams.values_list("name", flat=True)) == ["nlp", "vision"]
    # The edit is shown as it was sent (nlp unticked), so the admin only adds the reason.
    box = r'<input type="checkbox" name="train-teams" value="(\d+)"[^>]*checked'
    ticked = {m.group(1) for m in re.finditer(box, page)}
    assert ticked == {str(cluster["vision"].pk)}
    same = {"train-teams": [cluster["vision"].pk, cluster["nlp"].pk], "train-reason": ""}
    assert client.post("/govern/pools/train/teams/", same).status_code == 302  # nothing changes: no reason needed
    form = {"name": "urgent", "value": 900, "description": "", "preemptible": "", "may_preempt": "on",
            "min_runtime_s": 0, "grace_period_s": 30, "reason": ""}
    response = client.post("/govern/priority-classes/new/", form)
    assert response.status_code == 400 and "a reason is required" in response.content.decode()
    assert not PriorityClass.objects.filter(name="urgent").exists() and not AuditEntry.objects.exists()


def test_the_nodes_page_pages_and_filters_and_a_drain_returns_to_the_same_page(staff, cluster, monkeypatch):
    from portal.governance import views
    from tests.factories import NodeFactory, PoolFactory

    monkeypatch.setattr(views, "NODES_PAGE", 2)
    serving = PoolFactory(name="serving")
    for i in range(3):
        NodeFactory(name=f"gpu-l40s-{i}", pool=serving)
    client = client_for(staff)

    def names(page):
        return re.findall(r"<tr>\s*<td>([a-z0-9-]+)</td>", page)

    first = client.get("/govern/nodes/").content.decode()
    assert names(first) == ["gpu-l40s-0", "gpu-l40s-1"] and "5 nodes · showing 1–2" in first
    assert '<a href="?page=2" rel="next">' in first
    filtered = client.get("/govern/nodes/?pool=serving&page=2").content.decode()
    assert names(filtered) == ["gpu-l40s-2"]
    assert '<input type="hidden" name="back" value="pool=serving&amp;page=2">' in filtered
    assert names(client.get("/govern/nodes/?q=a100").content.decode()) == ["node-a100"]
    assert names(client.get("/govern/nodes/?state=draining").content.decode()) == []
    response = client.post("/govern/nodes/gpu-l40s-2/drain/", {"reason": "fan", "back": "pool=serving&page=2"})
    assert response.status_code == 302 and response.url == "/govern/nodes/?pool=serving&page=2"
    evil = client.post("/govern/nodes/gpu-l40s-2/resume/", {"reason": "ok", "back": "//evil.example/&pool=x"})
    assert evil.url == "/govern/nodes/"
    heat = client.get("/govern/nodes/?pool=serving").content.decode()
    assert "node-h100" not in heat and "3 nodes" in heat  # the heatmap and table follow the filter
    assert "must be one of" not in heat
    bad = client.get("/govern/nodes/?state=sleeping&pool=nowhere").content.decode()
    assert ("State must be one of ready, draining, drained, down, unhealthy; got &#x27;sleeping&#x27; (showing all)"
            in bad)
    assert "Pool must be one of serving, train; got &#x27;nowhere&#x27;" in bad and "5 nodes" in bad



def test_the_nodes_page_counts_gpus_in_use_from_open_allocations_without_joining_them_for_the_pager(
        staff, cluster, alice):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.cycle import run_cycle
    from scheduler.services.jobs import job_submit

    job_submit(user=alice, name="two", command="true", gpu_model="h100-80gb", gpus=2)
    run_cycle()
    with CaptureQueriesContext(connection) as captured:
        page = client_for(staff).get("/govern/nodes/?q=h100").content.decode()
    assert re.search(r"<td>node-h100</td>.*?<td class=\"num\">2</td>", page, re.S)
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(*)" in q["sql"] and "scheduler_node" in q["sql"]]
    assert counts and all("scheduler_allocation" not in sql for sql in counts)
