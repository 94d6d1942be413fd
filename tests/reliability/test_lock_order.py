"""Lock order: the cycle and a node's heartbeat both update holding jobs' rows (the cycle asks victims to
stop, the heartbeat moves delivered jobs to ``starting``). Both must take the rows in ascending id order,
or a cycle and a heartbeat deadlock (seen under bench/load.py: "deadlock detected", the cycle aborted)."""

import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.core.types import Decisions, Preemption
from scheduler.cycle import run_cycle
from scheduler.dispatch import persist_decisions
from scheduler.services.common import db_now
from scheduler.services.nodes import node_heartbeat
from tests.reliability.helpers import submit

pytestmark = pytest.mark.django_db


def updated_ids(queries, marker: str) -> list[int]:
    return [int(re.search(r'"id" = (\d+)', q["sql"]).group(1)) for q in queries if marker in q["sql"]]


def test_the_cycle_locks_victims_in_ascending_id_order_before_asking_them_to_stop(alice, cluster):
    from scheduler.models import Job
    from scheduler.models import Preemption as PreemptionRow

    jobs = [submit(alice) for _ in range(3)]
    run_cycle()
    victims = tuple(Preemption(job_id=j.pk, by_job_id=None, reason="Priority", message="m") for j in reversed(jobs))
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        assert persist_decisions(Decisions(preemptions=victims), {}, db_now()).preempted == 3
    sql = [q["sql"] for q in captured.captured_queries]
    lock = next(i for i, q in enumerate(sql) if "FOR NO KEY UPDATE" in q)
    stop = next(i for i, q in enumerate(sql) if "\"stop_reason\" = 'preempt'" in q)
    assert lock < stop and sql[lock].endswith("ORDER BY 1 ASC FOR NO KEY UPDATE")  # 1: the id column
    assert set(Job.objects.filter(stop_reason="preempt").values_list("pk", flat=True)) == {j.pk for j in jobs}
    assert sorted(PreemptionRow.objects.values_list("job_id", "attempt")) == sorted((j.pk, 1) for j in jobs)


def test_a_heartbeat_locks_its_jobs_in_ascending_id_order_then_moves_the_delivered_in_one_statement(alice, cluster):
    jobs = [submit(alice) for _ in range(3)]
    run_cycle()
    with CaptureQueriesContext(connection) as captured:
        node_heartbeat(node=cluster["nodes"][0], report={"seq": 1})
    sql = [q["sql"] for q in captured.captured_queries]
    [moved] = [q for q in sql if "\"state\" = 'starting'" in q]  # one statement moves them all
    assert sorted(int(i) for i in re.search(r'"id" IN \(([\d, ]+)\)', moved).group(1).split(", ")) == sorted(
        j.pk for j in jobs)
    lock = next(i for i, q in enumerate(sql) if "FOR NO KEY UPDATE" in q)  # every job held here, first
    first_write = next(i for i, q in enumerate(sql) if q.startswith('UPDATE "scheduler_job"'))
    assert lock < first_write and sql[lock].endswith("ORDER BY 1 ASC FOR NO KEY UPDATE")  # 1: the id column


def test_a_batch_of_job_events_locks_its_jobs_in_one_query_in_ascending_id_order_before_writing(alice, cluster):
    """A node's batch changes several jobs in one transaction: their rows are taken together, as the cycle and a
    heartbeat take theirs, or a batch and a cycle asking the same jobs to stop deadlock."""
    from scheduler.services.node_event_batch import node_events_apply

    jobs = [submit(alice) for _ in range(3)]
    run_cycle()
    events = [{"job_id": j.pk, "attempt": 1, "type": t, "exit_code": 0} for t in ("started", "exited")
              for j in reversed(jobs)]
    with CaptureQueriesContext(connection) as captured:
        node_events_apply(node=cluster["nodes"][0], events=events)
    sql = [q["sql"] for q in captured.captured_queries]
    locks = [i for i, q in enumerate(sql) if "FOR NO KEY UPDATE" in q or "FOR UPDATE" in q]
    first_write = next(i for i, q in enumerate(sql) if q.startswith("UPDATE"))
    assert len(locks) == 1 and locks[0] < first_write, sql
    assert re.search(r'ORDER BY "scheduler_job"\."id" ASC FOR NO KEY UPDATE$', sql[locks[0]]), sql[locks[0]]
