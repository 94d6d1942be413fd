"""GPU time lost to preemption and time spent queued, per team, only for teams the user may see."""

from datetime import timedelta

import pytest

from accounting.selectors import waste_by_team
from scheduler.models import JobTransition
from tests.accounting.helpers import T0, make_job, preempt

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def transition(job, from_state, to_state, at):
    JobTransition.objects.create(job=job, from_state=from_state, to_state=to_state, at=at, cause="test")


def test_it_sums_preemption_losses_and_queued_time_per_team(alice, charlie, cluster):
    job = make_job(alice, cluster["vision"])
    transition(job, "", "pending", T0)
    transition(job, "pending", "admitted", T0 + H)  # queued 1 h
    transition(job, "admitted", "running", T0 + 2 * H)
    transition(job, "running", "pending", T0 + 3 * H)  # preempted: queued again 30 min
    transition(job, "pending", "admitted", T0 + 3.5 * H)
    preempt(job, T0 + 3 * H, lost=7200.0)
    other = make_job(charlie, cluster["nlp"])
    transition(other, "", "pending", T0)  # still waiting at ``now``
    preempt(other, T0 + H, lost=60.0)

    now = T0 + 5 * H
    mine = waste_by_team(alice, start=T0, end=T0 + 24 * H, now=now)
    assert [(w.team, w.preemptions, w.gpu_hours_lost, w.queued_hours) for w in mine] == [("vision", 1, 2.0, 1.5)]
    theirs = waste_by_team(charlie, start=T0 + 2 * H, end=T0 + 24 * H, now=now)
    assert [(w.team, w.preemptions, w.queued_hours) for w in theirs] == [("nlp", 0, 3.0)]
