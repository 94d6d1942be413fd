"""Helpers shared by the reliability battery: a healthy scheduled state, the auditor as an assertion."""

import time

from accounting.services import usage_rollup
from scheduler.audit import audit
from scheduler.models import Job
from scheduler.services.jobs import job_submit
from scheduler.services.nodes import node_heartbeat, node_job_event


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
