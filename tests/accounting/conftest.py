"""Accounting fixtures: a month of usage for vision (alice) and nlp (charlie), rated by one rate card."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from accounting.services import usage_rollup
from accounting.services_billing import rate_card_create
from scheduler.models import Node
from tests.accounting.helpers import allocate, make_job, preempt

SEP = datetime(2026, 9, 1, tzinfo=UTC)
NOV = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def usage(alice, charlie, cluster):
    """vision: alice's 2-GPU training (10 h on h100) and a formula-named evaluation (1 h on a100);
    nlp: charlie's notebook on a quarter of an h100 for 4 h. One October hour for vision too. The nodes
    registered on September 1st, so their GPUs are capacity from then on."""
    rate_card_create(
        version=1,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        prices={"h100-80gb": Decimal("4.00"), "a100-40gb": Decimal("2.50")},
    )
    train = make_job(alice, cluster["vision"], name="resnet", gpus=2)
    for uuid in ("GPU-h100-0", "GPU-h100-1"):
        allocate(train, uuid, NOV + timedelta(days=3), NOV + timedelta(days=3, hours=10))
    evil = make_job(alice, cluster["vision"], name='=HYPERLINK("http://x.example","click")', kind="evaluation")
    allocate(evil, "GPU-a100-0", NOV + timedelta(days=4), NOV + timedelta(days=4, hours=1))
    old = make_job(alice, cluster["vision"], name="october")
    allocate(old, "GPU-h100-3", NOV - timedelta(hours=1), NOV)
    note = make_job(charlie, cluster["nlp"], name="nlp-notebook", kind="notebook", gpu_fraction="0.25")
    allocate(note, "GPU-h100-2", NOV + timedelta(days=5), NOV + timedelta(days=5, hours=4), share_milli=250)
    preempt(train, NOV + timedelta(days=3, hours=10), lost=1800.0)
    Node.objects.update(registered_at=SEP)
    usage_rollup(until=NOV + timedelta(days=30))
    return {"train": train, "evil": evil, "note": note}
