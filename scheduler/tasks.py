"""Celery tasks: thin, named, id-free wrappers over the cycle and node liveness. Safe to run twice."""

import time

from celery import shared_task
from django.conf import settings

from portal.celery import Task
from scheduler import wake
from scheduler.cycle import run_cycle as _run_cycle
from scheduler.services.node_jobs import nodes_check_liveness


class CycleTask(Task):
    """``delay`` is a wake-up: it raises the wanted flag (``scheduler.wake``) before the message goes, so a
    burst of wake-ups is answered by one cycle and none is missed by a running cycle.

    ``delay_on_commit`` (a submit, a release, a job's end) sends no message when the flag was up already: the
    wake-up that raised it has its message queued, or its cycle not yet reading (the cycle takes the flag
    before it reads), so the change just committed is seen either way. A task that finds a cycle running
    leaves the flag up and that cycle asks again after its commit (``delay``, which always sends), and beat's
    periodic cycle takes a flag whose message was lost (or never sent: the sender's process died first). A burst
    of submits sends a message or so per cycle, not one each (each cost ~1 ms, and a worker process a task), and
    the wake-ups of a burst that come while the sender is busy go as one flag push."""

    def delay(self, *args, **kwargs):
        wake.cycle_request()
        return super().delay(*args, wanted=True, **kwargs)

    def delay_on_commit(self, *args, **kwargs) -> None:
        """After the commit, the process's wake-up sender (``scheduler.wake_sender``) raises the flag and sends the
        message if the flag was down; the request does not wait for either. A run_cycle takes no arguments."""
        from scheduler import wake_sender

        wake_sender.send_on_commit(cycle=True)


@shared_task(base=CycleTask, name="scheduler.cycle", time_limit=120, soft_time_limit=100, ignore_result=True)
def run_cycle(wanted: bool = False, **_ignored) -> dict:
    """One scheduling cycle (single-flight: returns at once if another is running). A wake-up whose flag an
    earlier cycle already answered is skipped, and one that comes right after a cycle rests first (as long as
    that cycle took); beat's periodic run (``wanted=False``) always runs at once. After a cycle that ran, a
    wake-up that came meanwhile (while other tasks found the lock held) is asked for again."""
    if wanted and not wake.cycle_requested():
        return {"ran": False, "skipped": "answered by an earlier cycle"}
    if wanted and (rest := wake.cycle_rest_left()):
        time.sleep(rest)  # the wake-ups of the rest are answered together (scheduler.wake.cycle_rest)
    report = _run_cycle()
    if report.ran:
        wake.cycle_rest(sum(report.phases_ms.values()) / 1000 * settings.ROTA_CYCLE_REST_PCT / 100)
    if report.ran and wake.cycle_requested():
        run_cycle.delay()
    elif report.ran and report.reclaim_in_s is not None and report.reclaim_in_s <= 2 * settings.ROTA_CYCLE_INTERVAL_S:
        # A job waits for reclaim's hysteresis to end: run a cycle then, without waiting for beat's (a timed run,
        # like beat's, always runs; longer waits, such as minimum runtimes, are beat's to answer).
        run_cycle.apply_async(countdown=report.reclaim_in_s + 0.5)
    return report.as_dict()


@shared_task(name="scheduler.node_liveness", time_limit=60, soft_time_limit=50, ignore_result=True)
def node_liveness(**_ignored) -> list[str]:
    """Mark silent nodes down and requeue their jobs; wake the cycle if anything changed."""
    marked = nodes_check_liveness()
    if marked:
        run_cycle.delay()
    return marked


@shared_task(name="scheduler.telemetry_rollup", time_limit=300, soft_time_limit=280, ignore_result=True)
def telemetry_rollup(**_ignored) -> dict:
    """Roll raw GPU samples older than a day into hourly rows and delete them (idempotent)."""
    from scheduler.services.common import db_now
    from scheduler.services.telemetry import telemetry_rollup as rollup

    made, deleted = rollup(now=db_now())
    return {"rollups": made, "deleted": deleted}


@shared_task(name="scheduler.whatif", time_limit=1800, soft_time_limit=1750, ignore_result=True)
def whatif_run(run_id: int, **_ignored) -> None:
    """Replay a queued what-if (``scheduler.whatif.whatif_execute``); progress is saved on the run."""
    from scheduler.whatif import whatif_execute

    whatif_execute(run_id)


@shared_task(name="scheduler.loans_end", time_limit=60, soft_time_limit=50, ignore_result=True)
def loans_end(**_ignored) -> list[int]:
    """Record (and audit) the end of quota loans whose window is over (``scheduler.services.loans``)."""
    from scheduler.services.loans import loans_end as end

    return end()


@shared_task(name="scheduler.autoscale", time_limit=120, soft_time_limit=100, ignore_result=True)
def autoscale(**_ignored) -> list[str]:
    """Evaluate the autoscale of every inference service that has it on (``scheduler.services.autoscale``)."""
    from scheduler.services.autoscale import services_autoscale

    return services_autoscale()


@shared_task(name="scheduler.notebooks_probe", time_limit=120, soft_time_limit=100, ignore_result=True)
def notebooks_probe() -> int:
    """Record each running notebook server's own last activity (beat, every minute); idle reclaim reads it."""
    from scheduler.notebooks import notebooks_probe as probe

    return probe()
