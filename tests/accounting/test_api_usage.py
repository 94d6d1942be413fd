"""GET /api/v1/usage/: GPU-hours and cost per period and group, tenancy, clear errors."""

import pytest

pytestmark = pytest.mark.django_db
URL = "/api/v1/usage/"


def test_it_sums_usage_per_team_for_a_member(api, alice, usage):
    data = api(alice).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "group_by": "team", "agg": "month"}).json()
    assert data["results"] == [
        {
            "period": "2026-11-01T00:00:00+00:00",
            "group": "vision",
            "gpu_seconds": "75600.000",
            "gpu_hours": "21.0000",
            "cost": "82.50",
        }
    ]
    assert data["total_cost"] == "82.50" and data["currency"] == "USD"


def test_it_groups_by_gpu_model_per_day(api, alice, usage):
    data = api(alice).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "group_by": "gpu_model"}).json()
    assert [(r["period"][:10], r["group"], r["cost"]) for r in data["results"]] == [
        ("2026-11-04", "h100-80gb", "80.00"),
        ("2026-11-05", "a100-40gb", "2.50"),
    ]
    assert {r["group"] for r in data["results"]} == {"h100-80gb", "a100-40gb"}


def test_an_outsider_sees_no_other_team_and_gets_404_for_it(api, charlie, usage):
    client = api(charlie)
    data = client.get(URL, {"start": "2026-11-01", "end": "2026-11-30"}).json()
    assert {r["group"] for r in data["results"]} == {"nlp"}
    assert client.get(URL, {"start": "2026-11-01", "end": "2026-11-30", "team": "vision"}).status_code == 404


def test_bad_input_is_a_400_naming_the_field(api, alice):
    response = api(alice).get(URL, {"start": "2026-13-01", "end": "2026-11-30", "group_by": "planet"})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"start", "group_by"}
    assert response.json()["errors"]["group_by"] == [
        "must be one of team, department, user, kind, gpu_model, pool; got 'planet'"
    ]
    assert api(alice).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "agg": "year"}).json()["errors"] == {
        "agg": ["must be one of hour, day, week, month; got 'year'"]
    }
    reversed_range = api(alice).get(URL, {"start": "2026-11-30", "end": "2026-11-01"})
    assert reversed_range.status_code == 400 and "end" in reversed_range.json()["errors"]


@pytest.mark.parametrize(
    ("start", "end", "fields"),
    [("9999-12-01", "9999-12-31", {"start", "end"}), ("9998-12-25", "9999-01-01", {"end"}),
     ("0001-01-01", "1970-01-31", {"start"})],
)
def test_dates_out_of_range_are_a_400_naming_the_field_and_the_range(api, alice, start, end, fields):
    response = api(alice).get(URL, {"start": start, "end": end})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert set(errors) == fields and all("from 1970-01-01 to 9998-12-31" in errors[f][0] for f in fields)


@pytest.mark.parametrize("agg", ["hour", "day", "week", "month"])
def test_the_last_days_in_range_work_for_every_aggregation(api, alice, agg):
    response = api(alice).get(URL, {"start": "9998-12-25", "end": "9998-12-31", "agg": agg})
    assert response.status_code == 200 and response.json()["end"] == "9999-01-01T00:00:00+00:00"
