"""The home dashboard: your teams' counts, why work waits (only your teams'), links to team dashboards."""

import re

import pytest
from django.test import Client

from scheduler.cycle import run_cycle
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_home_summarizes_why_your_work_waits_and_nothing_of_other_teams(alice, charlie):
    job_submit(user=alice, name="fills", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb", gpus=2)
    run_cycle()
    page = client_for(alice).get("/").content.decode()
    waits = page.split("Why work waits", 1)[1].split("Ready capacity", 1)[0]
    assert "QuotaExceeded" in waits or "OverLimit" in waits
    other = client_for(charlie).get("/").content.decode()
    assert "Nothing of yours is waiting." in other and 'href="/teams/nlp/"' in other
    assert 'href="/teams/vision/"' not in other


def _listed_ids(client, link: str) -> list[int]:
    import html
    import re

    page = client.get(html.unescape(link))
    assert page.status_code == 200, link
    return sorted(int(i) for i in re.findall(r'<tr class="row-[a-z-]+">\s*<td><a href="/jobs/(\d+)/"',
                                              page.content.decode()))


def test_every_counter_links_to_a_list_of_exactly_the_jobs_it_counted(alice, charlie):
    import re

    from scheduler.models import Job

    states = {"running": "running", "admitted": "admitted", "starting": "starting", "pending-r": "pending",
              "pending-q": "pending", "pending-s": "pending", "held": "held", "failed": "failed", "timed": "timed-out",
              "done": "succeeded"}
    # Scheduling: the portal's own code for work no cycle has looked at yet
    reasons = {"pending-r": "Resources", "pending-q": "QuotaExceeded", "pending-s": "Scheduling", "held": "Held"}
    ids = {}
    for name, state in states.items():
        ids[name] = job_submit(user=alice, name=name, command="true", gpu_model="h100-80gb").pk
        Job.objects.filter(pk=ids[name]).update(state=state, pending_reason_code=reasons.get(name, ""))
    theirs = job_submit(user=charlie, name="theirs", command="true", gpu_model="h100-80gb")
    Job.objects.filter(pk=theirs.pk).update(state="pending", pending_reason_code="Resources")
    client = client_for(alice)
    home = client.get("/").content.decode()

    tiles = re.findall(r'<a class="tile" href="([^"]+)"[^>]*><b>(\d+)</b><span>(\w+)</span>', home)
    expected = {"running": ["running", "admitted", "starting"], "pending": ["pending-r", "pending-q", "pending-s"],
                "held": ["held"], "failed": ["failed"]}
    assert sorted(label for _, _, label in tiles) == sorted(expected)
    for link, count, label in tiles:
        want = sorted(ids[n] for n in expected[label])
        assert int(count) == len(want) and _listed_ids(client, link) == want, label

    waits = re.findall(r'<span class="code">(\w+)</span></td><td class="num"><a href="([^"]+)">(\d+)</a>', home)
    assert sorted(code for code, _, _ in waits) == ["Held", "QuotaExceeded", "Resources", "Scheduling"]
    for code, link, count in waits:
        want = sorted(ids[n] for n, r in reasons.items() if r == code)
        assert int(count) == len(want) and _listed_ids(client, link) == want, code

    team = client.get("/teams/vision/").content.decode()
    counters = dict((label, link) for link, _, label in re.findall(r'<a href="([^"]+)">(\d+) (running|waiting)</a>',
                                                                   team))
    assert _listed_ids(client, counters["running"]) == sorted(ids[n] for n in expected["running"])
    waiting = ("pending-r", "pending-q", "pending-s", "held")
    assert _listed_ids(client, counters["waiting"]) == sorted(ids[n] for n in waiting)
    all_its = re.search(r'<a class="button" href="([^"]+)">All its jobs</a>', team).group(1)
    assert _listed_ids(client, all_its) == sorted(ids.values())


def test_the_jobs_table_names_a_reason_that_is_no_code(alice):
    page = client_for(alice).get("/jobs/?reason=Not-a-code").content.decode()
    assert "reason must be a pending reason code such as Priority" in page


def test_a_counter_of_array_tasks_links_to_every_task_it_counted(alice):
    """The job list shows an array as one row; the counters count tasks (each asks for its GPUs), so they link to
    the list with every task a row, which lists exactly what they counted."""
    from scheduler.services.arrays import array_submit

    single = job_submit(user=alice, name="single", command="true", gpu_model="h100-80gb")
    sweep = array_submit(user=alice, array="0-2", name="sweep", command="true", gpu_model="h100-80gb")
    want = sorted([single.pk, *sweep.tasks.values_list("pk", flat=True)])
    client = client_for(alice)
    home = client.get("/").content.decode()
    [(link, count)] = re.findall(r'<a class="tile" href="([^"]+)"[^>]*><b>(\d+)</b><span>pending</span>', home)
    assert int(count) == 4 and _listed_ids(client, link) == want
    # the list by default: the array is one row (a link to the array), beside the single job
    default = client.get("/jobs/?state=pending").content.decode()
    assert _listed_ids(client, "/jobs/?state=pending") == [single.pk]
    assert default.count(f'<a href="/jobs/?array={sweep.pk}">array {sweep.pk}</a>') == 1
    assert "tasks must be each" in client.get("/jobs/?tasks=all").content.decode()
