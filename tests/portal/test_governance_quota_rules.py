"""The quota rules the page (preview and save), the API (``PUT /api/v1/quotas/``) and the service share: every
value range-checked to fit its column, values finer than 3 decimals refused (never rounded silently), every
error of a submission reported at once on its cell, and a reason required to save."""

import html
import re
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from portal.governance import services
from portal.models import AuditEntry
from scheduler.models import Quota
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def matrix(action="preview", reason="rebalance", **cells):
    """POST data for the quota matrix as it stands, with ``cells`` ('team/model' -> {field: text}) changed."""
    data = {"action": action, "reason": reason}
    for q in Quota.objects.select_related("team", "gpu_model"):
        key = f"q:{q.team.name}:{q.gpu_model.name}"
        data |= {f"{key}:guaranteed": str(q.guaranteed), f"{key}:limit": "" if q.limit is None else str(q.limit),
                 f"{key}:weight": str(q.weight), f"{key}:updated_at": q.updated_at.isoformat()}
    for key, fields in cells.items():
        team, model = key.split("/")
        data |= {f"q:{team}:{model}:{field}": value for field, value in fields.items()}
    return data


def put(client, *cells, reason="api edit"):
    return client.put("/api/v1/quotas/", {"quotas": list(cells), "reason": reason}, format="json")


def cell(cluster, team, model, **values):
    q = Quota.objects.filter(team=cluster[team], gpu_model=cluster[model]).first()
    return {"team": cluster[team].name, "gpu_model": cluster[model].name,
            "updated_at": q.updated_at.isoformat() if q else None,
            **({"guaranteed": q.guaranteed, "limit": q.limit, "weight": q.weight} if q else {"guaranteed": 0}),
            **values}


def invalid_inputs(page: str) -> set[str]:
    return set(re.findall(r'<input[^>]*\bname="([^"]+)"[^>]*\baria-invalid="true"', page))


def values_now() -> set[tuple]:
    return set(Quota.objects.values_list("team__name", "gpu_model__name", "guaranteed", "limit", "weight"))


# Values a column cannot hold (limit and guaranteed: numeric(9, 3); weight: numeric(7, 3)), each with the
# error naming the cell and the bound.
OUT_OF_RANGE = [
    ("limit", "1000000", "vision/a100-40gb: limit must be between 0 and 100000; got 1000000"),
    ("limit", "99999999999999999999", "vision/a100-40gb: limit must be between 0 and 100000"),
    ("limit", "100000.001", "vision/a100-40gb: limit must be between 0 and 100000"),
    ("guaranteed", "1e7", "vision/a100-40gb: guaranteed must be between 0 and 100000; got 10000000"),
    ("weight", "10000", "vision/a100-40gb: weight must be above 0 and below 10000; got 10000"),
    ("weight", "-2", "vision/a100-40gb: weight must be above 0 and below 10000; got -2"),
]


@pytest.mark.parametrize(("field", "value", "message"), OUT_OF_RANGE)
@pytest.mark.parametrize("action", ["preview", "save"])
def test_the_page_refuses_a_value_its_column_cannot_hold_naming_cell_and_bounds(staff, cluster, field, value,
                                                                               message, action):
    before = values_now()
    response = client_for(staff).post("/govern/quotas/", matrix(action, **{"vision/a100-40gb": {field: value}}))
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and "fits" not in page
    assert invalid_inputs(page) == {f"q:vision:a100-40gb:{field}"}
    assert values_now() == before and not AuditEntry.objects.exists()


@pytest.mark.parametrize(("field", "value", "message"), OUT_OF_RANGE)
def test_the_api_refuses_a_value_its_column_cannot_hold_naming_cell_and_bounds(api, staff, cluster, field, value,
                                                                              message):
    before = values_now()
    response = put(api(staff), cell(cluster, "vision", "a100", **{field: value}))
    assert response.status_code == 400
    assert message in response.json()["errors"][f"vision/a100-40gb.{field}"][0]
    assert values_now() == before and not AuditEntry.objects.exists()


def test_the_api_takes_the_largest_values_the_columns_hold(api, staff, cluster):
    response = put(api(staff), cell(cluster, "vision", "a100", guaranteed="1", limit=100000, weight="9999.999"))
    assert response.status_code == 200, response.json()
    q = Quota.objects.get(team=cluster["vision"], gpu_model=cluster["a100"])
    assert (q.limit, q.weight) == (Decimal(100000), Decimal("9999.999"))


def test_the_service_checks_the_bounds_itself(staff, cluster):
    q = Quota.objects.get(team=cluster["vision"], gpu_model=cluster["a100"])
    change = services.QuotaChange(team="vision", gpu_model="a100-40gb", guaranteed=Decimal(1),
                                  limit=Decimal(10**6), weight=Decimal(1), updated_at=q.updated_at)
    with pytest.raises(ValidationError) as exc:
        services.quota_matrix_set(user=staff, changes=[change], reason="r")
    assert set(exc.value.message_dict) == {"vision/a100-40gb.limit"}
    q.refresh_from_db()
    assert q.limit == 2


# The walk-through's submission: four mistakes in four cells (speech is a third team, with no quota yet).
FOUR_MISTAKES = {
    "vision/h100-80gb": {"weight": "abc"},
    "speech/h100-80gb": {"guaranteed": "-1"},
    "nlp/a100-40gb": {"guaranteed": "5", "limit": "4"},
    "speech/a100-40gb": {"limit": "-3"},
}
FOUR_MESSAGES = {
    "vision/h100-80gb.weight": "vision/h100-80gb: weight must be a number; got 'abc'",
    "speech/h100-80gb.guaranteed": "speech/h100-80gb: guaranteed must be between 0 and 100000; got -1",
    "nlp/a100-40gb.guaranteed": "nlp/a100-40gb: guaranteed 5 is above the limit 4",
    "speech/a100-40gb.limit": "speech/a100-40gb: limit must be between 0 and 100000; got -3",
}


@pytest.mark.parametrize("action", ["preview", "save"])
def test_the_page_reports_every_error_of_a_submission_at_once_and_keeps_the_input(staff, cluster, action):
    TeamFactory(name="speech")
    before = values_now()
    response = client_for(staff).post("/govern/quotas/", matrix(action, **FOUR_MISTAKES))
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    for message in FOUR_MESSAGES.values():
        assert message in page
    assert "Fix these 4 problems" in page
    assert invalid_inputs(page) == {"q:vision:h100-80gb:weight", "q:speech:h100-80gb:guaranteed",
                                    "q:nlp:a100-40gb:guaranteed", "q:speech:a100-40gb:limit"}
    for name, value in [("q:vision:h100-80gb:weight", "abc"), ("q:speech:h100-80gb:guaranteed", "-1"),
                        ("q:nlp:a100-40gb:guaranteed", "5"), ("q:nlp:a100-40gb:limit", "4"),
                        ("q:speech:a100-40gb:limit", "-3")]:
        assert f'name="{name}" value="{value}"' in page
    assert values_now() == before and not AuditEntry.objects.exists()


def test_the_api_reports_every_error_of_a_submission_at_once(api, staff, cluster):
    cluster["speech"] = TeamFactory(name="speech")
    cells = [cell(cluster, "vision", "h100", weight="abc"), cell(cluster, "speech", "h100", guaranteed=-1),
             cell(cluster, "nlp", "a100", guaranteed=5, limit=4), cell(cluster, "speech", "a100", limit="-3"),
             {"team": "nope", "gpu_model": "h100-80gb", "guaranteed": 1}]
    response = put(api(staff), *cells, reason="")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert set(errors) == set(FOUR_MESSAGES) | {"nope/h100-80gb.team", "reason"}
    for key, message in FOUR_MESSAGES.items():
        assert message in errors[key][0]
    assert not AuditEntry.objects.exists()


def test_a_refused_child_value_is_left_out_of_its_parents_sum_not_guessed(staff, cluster):
    """A child's guarantee that is not a number is unknown: its old value does not count, and the sum of the
    others is a lower bound, so an overflow it already shows is reported with the other errors."""
    dept = TeamFactory(name="research")
    Quota.objects.create(team=dept, gpu_model=cluster["h100"], guaranteed=3, limit=4)
    for team in (cluster["vision"], cluster["nlp"]):
        team.parent = dept
        team.save()
    TeamFactory(name="speech", parent=dept)
    client = client_for(staff)
    response = client.post("/govern/quotas/", matrix(**{"vision/h100-80gb": {"guaranteed": "x"},
                                                        "nlp/h100-80gb": {"guaranteed": "2", "limit": "0.5"}}))
    page = html.unescape(response.content.decode())
    assert "vision/h100-80gb: guaranteed must be a number" in page
    assert "nlp/h100-80gb: guaranteed 2 is above the limit 0.5" in page  # the rest is judged
    assert "children of research" not in page  # vision's old 2 + nlp's 2 would be 4: a guess, not an error
    response = client.post("/govern/quotas/", matrix(**{"vision/h100-80gb": {"guaranteed": "x"},
                                                        "speech/h100-80gb": {"guaranteed": "y"},
                                                        "nlp/h100-80gb": {"guaranteed": "4", "limit": "4"}}))
    page = html.unescape(response.content.decode())
    assert ("nlp/h100-80gb: the children of research would be guaranteed at least 4 GPUs in total, more than "
            "research's 3") in page
    assert "speech/h100-80gb: guaranteed must be a number; got 'y'" in page


@pytest.mark.parametrize("value", ["1.0005", "0.0001", "2.12345"])
def test_the_page_refuses_more_decimals_than_it_keeps_instead_of_rounding(staff, cluster, value):
    response = client_for(staff).post("/govern/quotas/",
                                      matrix(**{"vision/a100-40gb": {"guaranteed": value}}))
    assert response.status_code == 400
    page = response.content.decode()
    assert f"vision/a100-40gb: guaranteed {value} has more than 3 decimal places" in page
    assert "No changes." not in page
    assert invalid_inputs(page) == {"q:vision:a100-40gb:guaranteed"}


@pytest.mark.parametrize("value", ["1.0005", 1.0005])
def test_the_api_refuses_more_decimals_than_it_keeps(api, staff, cluster, value):
    response = put(api(staff), cell(cluster, "vision", "a100", guaranteed=value))
    assert response.status_code == 400
    assert "has more than 3 decimal places" in response.json()["errors"]["vision/a100-40gb.guaranteed"][0]
    assert Quota.objects.get(team=cluster["vision"], gpu_model=cluster["a100"]).guaranteed == 1


def test_trailing_zeros_are_not_extra_decimals(staff, cluster):
    response = client_for(staff).post("/govern/quotas/",
                                      matrix("save", **{"vision/a100-40gb": {"guaranteed": "1.50000"}}))
    assert response.status_code == 302
    assert Quota.objects.get(team=cluster["vision"], gpu_model=cluster["a100"]).guaranteed == Decimal("1.5")


@pytest.mark.parametrize("reason", ["", "   "])
def test_saving_quotas_needs_a_reason_and_keeps_the_preview(staff, cluster, reason):
    data = matrix("save", reason=reason, **{"vision/h100-80gb": {"limit": "6"}})
    response = client_for(staff).post("/govern/quotas/", data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "a reason is required: say why (it is kept in the audit log)" in page
    assert invalid_inputs(page) == {"reason"}
    assert 'value="save"' in page and 'name="q:vision:h100-80gb:limit" value="6"' in page  # fill it in, save
    assert Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"]).limit == 4
    assert not AuditEntry.objects.exists()
    ok = client_for(staff).post("/govern/quotas/", data | {"reason": "Q4 push"})
    assert ok.status_code == 302 and AuditEntry.objects.get().reason == "Q4 push"


def test_a_preview_needs_no_reason(staff, cluster):
    response = client_for(staff).post("/govern/quotas/", matrix(reason="", **{"vision/h100-80gb": {"limit": "6"}}))
    assert response.status_code == 200 and "a reason is required" not in response.content.decode()


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "  "}])
def test_the_api_needs_a_reason_to_put_quotas(api, staff, cluster, body):
    response = api(staff).put("/api/v1/quotas/", {"quotas": [cell(cluster, "vision", "h100", limit=6)], **body},
                              format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["reason"] == ["a reason is required: say why (it is kept in the audit log)"]
    assert Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"]).limit == 4
    assert not AuditEntry.objects.exists()


def test_the_service_needs_a_reason(staff, cluster):
    q = Quota.objects.get(team=cluster["vision"], gpu_model=cluster["h100"])
    change = services.QuotaChange(team="vision", gpu_model="h100-80gb", guaranteed=Decimal(2), limit=Decimal(6),
                                  weight=Decimal(1), updated_at=q.updated_at)
    with pytest.raises(ValidationError) as exc:
        services.quota_matrix_set(user=staff, changes=[change], reason=" ")
    assert set(exc.value.message_dict) == {"reason"}
