"""The authorization matrix, generated from the URL conf: every route × principal × method.

Generic rules hold for every route (so a route added tomorrow is covered without touching this file):
anonymous callers and node tokens reach no user route, people reach no node route, an outsider gets the
same 404 as for a missing object on every route naming another team's object, and nothing answers 500.
The explicit table then pins the owner / team-mate / outsider / team-admin / platform-admin / anonymous /
node answers for each job endpoint and page."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from scheduler.models import WhatIfRun

PUBLIC = {"login", "logout", "api-token", "api-schema", "api-docs", "favicon",  # favicon: a redirect to a static file
          "oidc_authentication_init", "oidc_authentication_callback"}  # single sign-on (a 404 while it is off)
NODE_ROUTES_PREFIX = "api/v1/node/"
STAFF_PREFIXES = ("govern/", "whatif/", "admin/")
# Platform-admin endpoints that name a job: refused (403) before the job is looked up, so the answer is the
# same for another team's job and a missing one (checked below).
STAFF_ONLY = {"api-job-priority-class"}


def walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            if str(p.pattern).startswith("admin/"):
                continue  # Django's admin has its own (staff-only) login; covered by test_the_admin_...
            yield from walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.name


ROUTES = sorted(set(walk(get_resolver().url_patterns)))


def fill(route: str, world, whatif_id: int) -> str:
    """The route with its parameters naming vision's objects (or the cluster's, for nodes and pools)."""
    values = {
        "<int:job_id>": world["job"].pk, "<int:template_id>": world["template"].pk,
        "<int:statement_id>": world["statement"].pk, "<int:run_id>": whatif_id, "<str:username>": "alice",
        "<str:action>": "hold", "<int:pk>": world["budget"].pk, "<slug:kind>": "training",
        "<int:loan_id>": world["loan"].pk, "<slug:action>": "approve", "<int:array_id>": world["array"].pk,
        "<slug:team>": "vision", "<slug:service>": "llm", "<int:key_id>": 1, "<path:path>": "v1/generate",
        "<int:number>": 1,
    }
    if route.startswith(("govern/nodes/", "api/v1/nodes/")):
        values["<slug:name>"] = "node-h100"
    elif route.startswith("govern/priority-classes/"):
        values["<slug:name>"] = "training"
    elif route.startswith(("govern/policies/", "api/v1/policies/")):
        values["<slug:name>"] = "rota"
    elif route.startswith(("govern/pools/", "govern/images/pools/")):
        values["<slug:name>"] = "train"
    else:
        values["<slug:name>"] = "vision"
    path = route
    for key, value in values.items():
        path = path.replace(key, str(value))
    assert "<" not in path, f"no value for a parameter of {route}: extend fill()"
    return "/" + path


def tenant_owned(route: str) -> bool:
    """Routes naming a team's object: a job, template, statement, quota loan, or the team itself."""
    if route.startswith(STAFF_PREFIXES) or route.startswith(NODE_ROUTES_PREFIX):
        return False
    if any(name == n for r, n in ROUTES if r == route for name in STAFF_ONLY):
        return False
    # /serve/<team>/… is reached with a service key, not as a member: its refusal is 401 (test_gateway)
    return any(p in route for p in ("<int:job_id>", "<int:template_id>", "<int:statement_id>", "<int:loan_id>",
                                    "<int:array_id>")) or (
        "teams/<slug:name>" in route) or ("<slug:team>" in route and not route.startswith("serve/"))


@pytest.fixture
def whatif_id(world):
    from django.utils import timezone

    now = timezone.now()
    return WhatIfRun.objects.create(name="w", created_by=world["users"]["platform_admin"],
                                    period_start=now.replace(year=now.year - 1), period_end=now).pk


@pytest.mark.django_db
def test_every_route_is_in_the_matrix():
    assert len(ROUTES) > 40
    names = {name for _, name in ROUTES}
    assert {"api-job", "api-job-cancel", "job-detail", "node-heartbeat", "api-schema"} <= names


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_callers_reach_only_public_routes(world, client_for, whatif_id, method):
    client = client_for("anonymous")
    leaks = []
    for route, name in ROUTES:
        if name in PUBLIC:
            continue
        response = getattr(client, method)(fill(route, world, whatif_id))
        redirected_to_login = response.status_code == 302 and "/login/" in response.get("Location", "")
        if not (redirected_to_login or response.status_code in (401, 403, 405)):
            leaks.append(f"{method.upper()} {route} ({name}): {response.status_code}")
    assert leaks == []


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_a_node_token_reaches_no_user_route(world, client_for, whatif_id, method):
    client = client_for("node")
    leaks = []
    for route, name in ROUTES:
        if name in PUBLIC or route.startswith(NODE_ROUTES_PREFIX):
            continue
        status = getattr(client, method)(fill(route, world, whatif_id)).status_code
        if 200 <= status < 300 or status >= 500:
            leaks.append(f"{method.upper()} {route} ({name}): {status}")
    assert leaks == []


@pytest.mark.django_db
@pytest.mark.parametrize("principal", ["owner", "team_admin", "platform_admin"])
def test_people_reach_no_node_route(world, client_for, whatif_id, principal):
    client = client_for(principal)
    for route, name in ROUTES:
        if route.startswith(NODE_ROUTES_PREFIX):
            response = client.post(fill(route, world, whatif_id), {"seq": 1}, content_type="application/json")
            assert response.status_code in (401, 403), f"{route} ({name}) answered {principal}: {response.status_code}"


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_an_outsider_gets_404_for_every_route_naming_another_teams_object(world, client_for, whatif_id, method):
    client = client_for("outsider")
    wrong = []
    checked = 0
    for route, name in ROUTES:
        if not tenant_owned(route):
            continue
        checked += 1
        response = getattr(client, method)(fill(route, world, whatif_id))
        if response.status_code not in (404, 405):
            wrong.append(f"{method.upper()} {route} ({name}): {response.status_code}")
        elif response.status_code == 404:
            assert b"vision" not in response.content and b"secret" not in response.content
    assert checked >= 10 and wrong == []


@pytest.mark.django_db
@pytest.mark.parametrize("principal", ["owner", "mate", "outsider", "team_admin", "platform_admin"])
def test_no_route_answers_500_to_anyone(world, client_for, whatif_id, principal):
    client = client_for(principal)
    errors = []
    for route, name in ROUTES:
        if name == "logout" or route.startswith(NODE_ROUTES_PREFIX):
            continue
        path = fill(route, world, whatif_id)
        for method in ("get", "post"):
            status = getattr(client, method)(path).status_code
            if status >= 500:
                errors.append(f"{method.upper()} {route} ({name}): {status}")
    assert errors == []


@pytest.mark.django_db
def test_staff_only_job_routes_answer_people_the_same_for_another_teams_job_and_a_missing_one(world, client_for):
    client = client_for("outsider")
    for route, name in ROUTES:
        if name in STAFF_ONLY:
            existing = client.post("/" + route.replace("<int:job_id>", str(world["job"].pk))).status_code
            missing = client.post("/" + route.replace("<int:job_id>", "999999")).status_code
            assert existing == missing == 403, (route, existing, missing)


# The explicit matrix for jobs: expected status per principal, in PRINCIPALS order
# (owner, mate, outsider, team_admin, platform_admin, anonymous, node). 302L = redirect to the login page.
JOB_MATRIX = [
    ("get", "/api/v1/jobs/{job}/", (200, 200, 404, 200, 200, 401, 401)),
    ("get", "/api/v1/jobs/{job}/logs/", (200, 200, 404, 200, 200, 401, 401)),
    ("post", "/api/v1/jobs/{job}/hold/", (200, 403, 404, 200, 200, 401, 401)),
    ("post", "/api/v1/jobs/{job}/cancel/", (200, 403, 404, 200, 200, 401, 401)),
    # any member of the team may report a checkpoint; the job waits here, so a member hears 409 (not running)
    ("post", "/api/v1/jobs/{job}/checkpoint/", (409, 409, 404, 409, 403, 401, 401)),
    ("get", "/jobs/{job}/", (200, 200, 404, 200, 200, "302L", "302L")),
    ("get", "/jobs/{job}/log/", (200, 200, 404, 200, 200, "302L", "302L")),
    ("post", "/jobs/{job}/cancel/", (302, 403, 404, 302, 302, "302L", "302L")),
]


@pytest.mark.django_db
@pytest.mark.parametrize("method,path,expected", JOB_MATRIX, ids=[f"{m} {p}" for m, p, _ in JOB_MATRIX])
def test_the_job_matrix(world, client_for, method, path, expected):
    from scheduler.services.jobs import job_submit

    seen = {}
    for principal, want in zip(("owner", "mate", "outsider", "team_admin", "platform_admin", "anonymous", "node"),
                               expected, strict=True):
        # a fresh job of alice's per principal, so one principal's cancel does not change the next one's answer
        job = job_submit(user=world["users"]["owner"], name="m", command="true", gpu_model="h100-80gb")
        response = getattr(client_for(principal), method)(path.format(job=job.pk))
        got = response.status_code
        if got == 302 and "/login/" in response.get("Location", ""):
            got = "302L"
        seen[principal] = got
        if got != want:
            pytest.fail(f"{method.upper()} {path} as {principal}: {got}, expected {want}; so far {seen}")


# The same for job arrays: a fresh array of alice's per principal.
ARRAY_MATRIX = [
    ("get", "/api/v1/arrays/{array}/", (200, 200, 404, 200, 200, 401, 401)),
    ("post", "/api/v1/arrays/{array}/cancel/", (200, 403, 404, 200, 200, 401, 401)),
    ("get", "/jobs/?array={array}", (200, 200, 404, 200, 200, "302L", "302L")),
    ("post", "/jobs/arrays/{array}/cancel/", (302, 403, 404, 302, 302, "302L", "302L")),
]


@pytest.mark.django_db
@pytest.mark.parametrize("method,path,expected", ARRAY_MATRIX, ids=[f"{m} {p}" for m, p, _ in ARRAY_MATRIX])
def test_the_array_matrix(world, client_for, method, path, expected):
    from scheduler.services.arrays import array_submit

    for principal, want in zip(("owner", "mate", "outsider", "team_admin", "platform_admin", "anonymous", "node"),
                               expected, strict=True):
        job_array = array_submit(user=world["users"]["owner"], array="0-1", name="m", command="true",
                                 gpu_model="h100-80gb")
        response = getattr(client_for(principal), method)(path.format(array=job_array.pk))
        got = response.status_code
        if got == 302 and "/login/" in response.get("Location", ""):
            got = "302L"
        assert got == want, f"{method.upper()} {path} as {principal}: {got}, expected {want}"


@pytest.mark.django_db
def test_every_operation_of_the_openapi_schema_is_a_route_of_the_matrix(client_for):
    import re

    schema = client_for("owner").get("/api/schema/?format=json").json()
    patterns = [re.compile("^/" + re.sub(r"<[^>]+>", "[^/]+", route) + "$") for route, _ in ROUTES]
    missing = [path for path in schema["paths"]
               if not any(p.match(re.sub(r"\{[^}]+\}", "x1", path)) for p in patterns)]
    assert len(schema["paths"]) >= 15 and missing == []
    anonymous = client_for("anonymous")
    for path, operations in schema["paths"].items():
        if path.startswith(("/api/v1/auth/", "/api/schema")):
            continue
        for method in operations:
            if method in ("get", "post", "put", "delete", "patch"):
                url = re.sub(r"\{[^}]+\}", "1", path)
                status = getattr(anonymous, method)(url).status_code
                assert status in (401, 403), f"anonymous {method.upper()} {path}: {status}"
