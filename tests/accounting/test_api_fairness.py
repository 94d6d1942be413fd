"""GET /api/v1/reports/fairness/: entitled vs received GPU-hours and waiting below the guarantee, per team."""

from datetime import UTC, datetime, timedelta

import pytest

from tests.accounting.helpers import history, make_job
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/reports/fairness/"
TEN_DAYS = {"start": "2026-11-01", "end": "2026-11-10"}  # 240 hours, all in the past
NOV2 = datetime(2026, 11, 2, tzinfo=UTC)


@pytest.fixture
def waited(alice, cluster, usage):
    """A vision job that waited two hours on Nov 2 (vision held nothing then), was admitted and ran."""
    job = make_job(alice, cluster["vision"], name="waiter", state="succeeded")
    history(job, ("pending", NOV2), ("admitted", NOV2 + timedelta(hours=2)), ("running", NOV2 + timedelta(hours=2)))
    return job


def rows(response):
    assert response.status_code == 200, response.content
    return {r["team"]: r for r in response.json()["results"]}


def test_it_states_entitled_and_received_gpu_hours_per_model(api, alice, waited):
    vision = rows(api(alice).get(URL, TEN_DAYS))["vision"]
    assert vision["hours"] == 240 and vision["guaranteed"] == 3
    lines = {ln["gpu_model"]: ln for ln in vision["lines"]}
    # h100: capacity 4, guarantees vision 2 + nlp 1, the spare GPU split by equal weights: 2.5 GPUs
    assert lines["h100-80gb"]["entitled_gpus"] == 2.5 and lines["h100-80gb"]["entitled_gpu_hours"] == 600
    assert lines["h100-80gb"]["received_gpu_hours"] == pytest.approx(20)
    # a100: capacity 2, only vision has a quota (1 guaranteed) and gets the spare GPU too
    assert lines["a100-40gb"]["entitled_gpu_hours"] == 480 and lines["a100-40gb"]["received_gpu_hours"] == 1
    assert vision["received_ratio"] == pytest.approx(21 / 1080)


def test_it_counts_the_time_a_team_waited_below_its_guarantee(api, alice, waited):
    vision = rows(api(alice).get(URL, TEN_DAYS))["vision"]
    assert vision["waiting_hours"] == 2 and vision["below_hours"] == 2
    assert vision["shortfall_gpu_hours"] == 6  # guaranteed 3 GPUs, held none, for two hours


def test_a_member_sees_only_their_team(api, charlie, waited):
    result = rows(api(charlie).get(URL, TEN_DAYS))
    assert set(result) == {"nlp"}
    assert result["nlp"]["lines"][0]["entitled_gpu_hours"] == 360  # 1.5 GPUs × 240 h
    assert result["nlp"]["waiting_hours"] == 0


def test_an_outsider_gets_404_for_another_team_and_nothing_otherwise(api, charlie, waited):
    assert api(charlie).get(URL, {**TEN_DAYS, "team": "vision"}).status_code == 404
    assert rows(api(UserFactory(username="dave")).get(URL, TEN_DAYS)) == {}


def test_staff_see_every_team_and_a_month_works(api, waited):
    result = rows(api(UserFactory(username="root", is_staff=True)).get(URL, {"month": "2026-10"}))
    assert set(result) == {"vision", "nlp"}
    assert result["vision"]["hours"] == 744
    h100 = next(ln for ln in result["vision"]["lines"] if ln["gpu_model"] == "h100-80gb")
    assert h100["received_gpu_hours"] == 1  # the October hour


@pytest.mark.parametrize(
    ("params", "field"),
    [({"month": "2026-13"}, "month"), ({}, "start"), ({"start": "2026-11-05", "end": "2026-11-01"}, "end")],
)
def test_bad_ranges_get_clear_errors(api, alice, params, field):
    response = api(alice).get(URL, params)
    assert response.status_code == 400 and field in response.json()["errors"]


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"month": "9999-12"}, {"month"}),
        ({"start": "9999-12-01", "end": "9999-12-31"}, {"start", "end"}),
        ({"start": "9998-12-01", "end": "9999-01-01"}, {"end"}),
        ({"start": "1969-12-31", "end": "1970-01-01"}, {"start"}),
    ],
)
def test_dates_out_of_range_are_a_400_naming_the_field_and_the_range(api, alice, params, fields):
    response = api(alice).get(URL, params)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert set(errors) == fields and all("from 1970-01" in errors[f][0] for f in fields)


@pytest.mark.parametrize("params", [{"month": "9998-12"}, {"start": "9998-12-01", "end": "9998-12-31"}])
def test_the_last_days_in_range_work(api, alice, params):
    response = api(alice).get(URL, params)
    assert response.status_code == 200 and response.json()["end"] == "9999-01-01T00:00:00+00:00"


def test_anonymous_users_are_refused(api):
    assert api().get(URL, TEN_DAYS).status_code in (401, 403)
