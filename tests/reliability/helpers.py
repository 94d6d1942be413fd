"""Helpers shared by the reliability battery: a healthy scheduled state, the auditor as an assertion."""

import time

from django.db import connection, transaction

from accounting.services import usage_rollup
from portal import locks
from scheduler.audit import audit
from scheduler.models import Job, JobTransition, PriorityClass
from scheduler.services.jobs import job_submit
from scheduler.services.node_jobs import node_job_event
from scheduler.services.nodes import node_heartbeat


def submit(user, **kw):
    return job_submit(user=user, **{"name": "j", "command": "true", "gpu_model": "h100-80gb", **kw})


def assert_sound(*, ledger: bool = True, rollup: bool = False) -> None:
    """Fail with every finding when the auditor finds anything (optionally after a ledger rollup)."""
    if rollup:
        usage_rollup()
    findings = audit(ledger=ledger)
    assert findings == [], "\n".join(findings)


def run_on_node(node, job, seq: int) -> int:
    """Drive ``job`` to running the way its node would: a heartbeat delivers it, then ``started``."""
    node_heartbeat(node=node, report={"seq": seq})
    node_job_event(node=node, job_id=job.pk, event={"type": "started", "attempt": job.attempt, "pid": 1})
    return seq + 1


def finish_on_node(node, job, exit_code: int = 0) -> None:
    node_job_event(node=node, job_id=job.pk, event={"type": "exited", "attempt": job.attempt,
                                                   "exit_code": exit_code})


def state_of(job_id: int) -> str:
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


class Stopwatch:
    """Measures recovery figures; ``print`` them so ``pytest -s`` (and make soak) shows them."""

    def __init__(self, what: str):
        self.what, self.started = what, time.monotonic()

    def stop(self) -> float:
        elapsed = time.monotonic() - self.started
        print(f"\n[figure] {self.what}: {elapsed:.2f} s")
        return elapsed


def cycle_lock_held() -> bool:
    """Whether some session holds the scheduling cycle's advisory lock in this test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [locks.SCHEDULING_CYCLE],
        )
        return cursor.fetchone()[0] > 0


def backlog(user, team, n: int) -> None:
    """``n`` pending jobs with their submit transitions, written in bulk (a big queue makes cycles slow)."""
    pc = PriorityClass.objects.get(name="training")
    with transaction.atomic():
        _backlog(user, team, pc, n)


def _backlog(user, team, pc, n: int) -> None:
    jobs = Job.objects.bulk_create(
        Job(team=team, submitted_by=user, name=f"b{i}", command="true", gpus=8, priority_class=pc,
            time_limit_minutes=60) for i in range(n)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    JobTransition.objects.bulk_create(
        JobTransition(job=j, from_state="", to_state="pending", at=now, cause="submitted") for j in jobs
    )


class ContinuousAudit:
    """Runs the auditor (ledger aside) every ``interval`` s in a thread of its own while a fault test runs;
    ``stop()`` returns every distinct finding seen. Committed states must be sound at every instant."""

    def __init__(self, interval: float = 0.3):
        import threading

        self.interval, self.findings, self.rounds = interval, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from django.db import InterfaceError, OperationalError

        try:
            while not self._stop.is_set():
                try:
                    for line in audit(ledger=False):
                        if line not in self.findings:
                            self.findings.append(line)
                    self.rounds += 1
                except (OperationalError, InterfaceError):  # a database restart: try again on a new connection
                    connection.close()
                self._stop.wait(self.interval)
        finally:
            connection.close()

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(30)
        print(f"\n[figure] continuous audit: {self.rounds} rounds, {len(self.findings)} findings")
        return self.findings
