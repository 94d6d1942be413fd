"""The quote: the engine's answer for a job that is not submitted yet, its cost and the team's quota."""

from decimal import Decimal

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Job
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def quote(client, **body):
    return client.post("/api/v1/jobs/quote/", {"name": "q", "command": "true", **body}, format="json")


def test_a_job_that_fits_is_quoted_to_start_now_with_quota_left(api, alice):
    response = quote(api(alice), gpu_model="h100-80gb", gpus=2)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["starts_now"] is True
    assert body["quota"] == {"gpu_model": "h100-80gb", "guaranteed": 2.0, "limit": 4.0, "in_use": 0.0,
                             "remaining": 4.0}
    assert not Job.objects.exists(), "a quote saves nothing"


def test_a_job_over_quota_is_quoted_with_the_reason_it_would_wait(api, alice):
    job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    body = quote(api(alice), gpu_model="h100-80gb", gpus=1).json()
    assert body["starts_now"] is False
    assert body["pending_reason"]["code"] == "QuotaExceeded"
    assert body["quota"]["remaining"] == 0.0


def test_the_quote_prices_the_job_at_the_rate_card(api, alice, cluster):
    from accounting.models import RateCard, RateCardEntry

    card = RateCard.objects.create(version=1, effective_from="2020-01-01T00:00:00Z", currency="EUR")
    RateCardEntry.objects.create(rate_card=card, gpu_model=cluster["h100"], price_per_gpu_hour=Decimal("2.50"))
    body = quote(api(alice), gpu_model="h100-80gb", gpus=2, time_limit_minutes=90).json()
    assert body["hourly_cost"] == "5.00" and body["max_total_cost"] == "7.50" and body["currency"] == "EUR"


def test_a_bad_quote_request_names_the_field(api, alice):
    response = quote(api(alice), gpu_model="nope")
    assert response.status_code == 400 and "gpu_model" in response.json()["errors"]


def test_the_submit_page_renders_a_quote_panel(alice, client):
    client.force_login(alice)
    response = client.post("/jobs/quote/", {"team": "vision", "name": "x", "kind": "training", "command": "true",
                                            "gpus": 1, "gpu_model": "h100-80gb"})
    assert response.status_code == 200
    assert b"Starts now" in response.content


def test_the_quote_panel_waits_for_required_fields_and_names_wrong_ones_by_their_label(alice, client):
    client.force_login(alice)
    empty = client.post("/jobs/quote/", {"team": "vision", "kind": "training", "gpus": 1}).content.decode()
    assert "Fill in the form" in empty and "required" not in empty
    wrong = client.post("/jobs/quote/", {"team": "vision", "kind": "training", "gpus": 0,
                                         "gpu_fraction": "1.5"}).content.decode()
    assert "GPUs: Ensure this value is greater than or equal to 1." in wrong
    assert "GPU fraction:" in wrong and "required" not in wrong and "gpu_fraction" not in wrong


def test_quotes_are_limited_per_person_across_the_api_and_the_form(api, alice, bob, charlie, client, monkeypatch):
    from portal.throttle import QuoteThrottle

    monkeypatch.setattr(QuoteThrottle, "rate", "2/min", raising=False)
    for _ in range(2):
        assert quote(api(alice), gpu_model="h100-80gb", gpus=1).status_code == 200
    refused = quote(api(alice), gpu_model="h100-80gb", gpus=1)
    assert refused.status_code == 429 and refused["Retry-After"]
    assert refused.json()["detail"].startswith("too many quotes: at most 2/min; try again in ")
    assert quote(api(charlie), gpu_model="h100-80gb", gpus=1).status_code == 200  # a person's own budget
    # The form shares alice's budget and says so in the panel (htmx swaps only answers that succeed).
    client.force_login(alice)
    form = {"team": "vision", "name": "x", "kind": "training", "command": "true", "gpus": 1, "gpu_model": "h100-80gb"}
    panel = client.post("/jobs/quote/", form)
    assert panel.status_code == 200 and b"Too many quotes: at most 2/min; try again in" in panel.content
    assert b"Starts now" not in panel.content
    # A form that cannot be quoted yet costs nothing and still names what is missing or wrong.
    client.force_login(bob)
    for _ in range(3):
        assert b"Fill in the form" in client.post("/jobs/quote/", {"team": "vision", "kind": "training"}).content
    assert b"Starts now" in client.post("/jobs/quote/", form).content
