"""API tokens are remembered per process at the reference version (``portal.api.TokenAuthentication``,
``scheduler.services.reference.Reference.api_token``), and each change that decides a token's request counts from
the first request after its commit, whatever writes it (the ORM, ``QuerySet.update``, SQL): a token deleted or
regenerated, its user made inactive, deleted or changed. A login's ``last_login`` stamp leaves the version (every
browser login would otherwise empty every process's memory). Each request gets its own user object."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler.services import reference
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

VALID = {"name": "resnet", "command": "python train.py", "gpus": 1, "gpu_model": "h100-80gb"}


def _client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _sql(call) -> str:
    with CaptureQueriesContext(connection) as captured:
        call()
    return " ".join(q["sql"] for q in captured.captured_queries)


@pytest.fixture
def token(alice):
    return Token.objects.create(user=alice)


def test_a_warm_tokens_request_reads_neither_the_token_nor_its_user(token):
    client = _client(token.key)
    assert client.get("/api/v1/jobs/").status_code == 200  # the token and its user are read once
    sql = _sql(lambda: client.get("/api/v1/jobs/"))
    assert '"authtoken_token"' not in sql and '"auth_user"' not in sql.split("FROM", 2)[1], sql
    assert sql.startswith("SELECT n FROM rota_reference_version"), sql


def test_a_submit_reads_the_version_once_for_its_token_and_its_lookups(token):
    client = _client(token.key)
    assert client.post("/api/v1/jobs/", VALID, format="json").status_code == 201
    with CaptureQueriesContext(connection) as captured:
        assert client.post("/api/v1/jobs/", VALID, format="json").status_code == 201
    queries = [q["sql"] for q in captured.captured_queries]
    assert len(queries) == 2 and "rota_reference_version" in queries[0], queries  # the version, the job's INSERT


@pytest.mark.parametrize("delete", [
    lambda token: token.delete(),
    lambda token: Token.objects.filter(pk=token.pk).delete(),
    lambda token: connection.cursor().execute("DELETE FROM authtoken_token WHERE key = %s", [token.key]),
])
def test_a_deleted_token_fails_at_the_next_request(token, delete):
    client = _client(token.key)
    assert client.get("/api/v1/jobs/").status_code == 200
    delete(token)
    answer = client.get("/api/v1/jobs/")
    assert answer.status_code == 401 and answer.json()["detail"] == "Invalid token."


def test_a_regenerated_token_replaces_the_old_one_at_once(token, alice):
    old = _client(token.key)
    assert old.get("/api/v1/jobs/").status_code == 200
    token.delete()  # how DRF's and the portal's "new token" work: the key is the row's primary key
    new = Token.objects.create(user=alice)
    assert old.get("/api/v1/jobs/").status_code == 401
    assert _client(new.key).get("/api/v1/jobs/").status_code == 200


@pytest.mark.parametrize("deactivate", [
    lambda user: User.objects.filter(pk=user.pk).update(is_active=False),
    lambda user: connection.cursor().execute("UPDATE auth_user SET is_active = false WHERE id = %s", [user.pk]),
])
def test_a_user_made_inactive_fails_at_the_next_request(token, alice, deactivate):
    client = _client(token.key)
    assert client.get("/api/v1/jobs/").status_code == 200
    deactivate(alice)
    answer = client.get("/api/v1/jobs/")
    assert answer.status_code == 401 and answer.json()["detail"] == "User inactive or deleted."


def test_a_deleted_user_fails_at_the_next_request(db):
    user = UserFactory(username="leaving")
    client = _client(Token.objects.create(user=user).key)
    assert client.get("/api/v1/jobs/").status_code == 200
    user.delete()
    assert client.get("/api/v1/jobs/").status_code == 401


def test_a_user_made_or_unmade_platform_admin_counts_at_the_next_request(token, alice):
    client = _client(token.key)
    assert client.get("/api/v1/policies/").status_code == 403
    User.objects.filter(pk=alice.pk).update(is_staff=True)
    assert client.get("/api/v1/policies/").status_code == 200
    User.objects.filter(pk=alice.pk).update(is_staff=False)
    assert client.get("/api/v1/policies/").status_code == 403


def test_a_login_stamp_leaves_the_version_and_other_changes_to_a_user_move_it(alice, client):
    alice.set_password("right-horse-battery")
    alice.save()
    before = reference.version()
    User.objects.filter(pk=alice.pk).update(last_login=timezone.now())
    assert client.post("/login/", {"username": "alice", "password": "right-horse-battery"}).status_code == 302
    assert User.objects.get(pk=alice.pk).last_login is not None
    assert reference.version() == before
    User.objects.filter(pk=alice.pk).update(last_login=timezone.now(), email="alice@example.org")
    assert reference.version() != before


def test_each_request_gets_its_own_user_and_token(token, alice):
    lookups = reference.now()
    first_user, first_token = lookups.api_token(token.key)
    first_user.is_staff = True  # a view that changed its request's user changes nobody else's
    second_user, second_token = lookups.api_token(token.key)
    assert second_user is not first_user and second_token is not first_token
    assert not second_user.is_staff and second_user.pk == alice.pk and second_token.user is second_user
    assert lookups.api_token("not a key") is None
