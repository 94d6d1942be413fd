"""The node API's Slurm accounting call (no Slurm): a record is compared only once Rota has ended the attempt,
only by the node it ran on, and bad records are refused naming the field."""

from datetime import timedelta

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Allocation, SlurmAccounting
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db
URL = "/api/v1/node/slurm/accounting/"


def record(job, **extra) -> dict:
    return {"job_id": job.pk, "attempt": 1, "slurm_job_id": 7, "state": "COMPLETED", "elapsed_s": 100.0, **extra}


def test_a_record_waits_for_rota_to_end_the_attempt_then_is_compared_and_a_second_report_changes_nothing(
        alice, cluster, node_client, settings):
    job = job_submit(user=alice, name="j", command="true", gpu_model="h100-80gb", gpus=1)
    run_cycle()
    [allocation] = Allocation.objects.filter(job=job)
    client = node_client(allocation.node)
    answer = client.post(URL, {"records": [record(job, gpus=1)]}, format="json").json()
    assert answer == {"results": {f"{job.pk}:1": "waiting"}} and not SlurmAccounting.objects.exists()
    Allocation.objects.filter(pk=allocation.pk).update(ended_at=allocation.started_at + timedelta(seconds=110))
    for _ in range(2):
        answer = client.post(URL, {"records": [record(job, gpus=1)]}, format="json").json()
        assert answer == {"results": {f"{job.pk}:1": "recorded"}}
    row = SlurmAccounting.objects.get()
    assert (row.slurm_gpu_seconds, row.rota_gpu_seconds, row.mismatch, row.gpus_from_slurm) == (100, 110, False, True)
    settings.ROTA_SLURM_ACCOUNTING_TOLERANCE_S = 5
    client.post(URL, {"records": [record(job)]}, format="json")  # no GPU count from Slurm: Rota's is used
    row.refresh_from_db()
    assert (row.mismatch, row.gpus, row.gpus_from_slurm, row.tolerance_s) == (True, 1, False, 5)
    assert SlurmAccounting.objects.count() == 1


def test_another_nodes_attempt_or_a_job_that_does_not_exist_is_not_this_nodes(alice, cluster, node_client):
    job = job_submit(user=alice, name="j", command="true", gpu_model="h100-80gb", gpus=1)
    run_cycle()
    [allocation] = Allocation.objects.filter(job=job)
    other = next(n for n in cluster["nodes"] if n.pk != allocation.node_id)
    answer = node_client(other).post(URL, {"records": [record(job), {**record(job), "job_id": 999_999}]},
                                     format="json").json()
    assert answer == {"results": {f"{job.pk}:1": "not this node's", "999999:1": "not this node's"}}


def test_bad_records_are_refused_naming_the_field(cluster, node_client):
    client = node_client()
    bad = {"job_id": 1, "attempt": 1, "slurm_job_id": 7, "state": "COMPLETED", "elapsed_s": -1}
    response = client.post(URL, {"records": [bad]}, format="json")
    assert response.status_code == 400 and "elapsed_s" in str(response.json()), response.json()
    response = client.post(URL, {"records": [{**bad, "elapsed_s": 1}] * 501}, format="json")
    assert response.status_code == 400 and "records" in str(response.json()), response.json()
    assert client.post(URL, {"records": []}, format="json").status_code == 200
    assert SlurmAccounting.objects.count() == 0
