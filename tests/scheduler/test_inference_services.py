"""An inference service as a whole: scaled while it runs (new replicas copy the newest one, scaling down
cancels the highest-numbered; audited), autoscaled between min and max on request rate with hysteresis, and
its page and API for members only (others 404), with its replicas, traffic, percentiles and keys."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from portal.models import AuditEntry
from scheduler.models import InferenceService, Job, ServiceKey, ServiceTraffic
from scheduler.models.gateway import LATENCY_BUCKETS
from scheduler.selectors_services import latency_quantile, service_summary
from scheduler.services.autoscale import autoscale_decide, services_autoscale
from scheduler.services.inference import service_autoscale_set, service_replicas, service_scale
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def replica(user, name, **kw):
    return job_submit(user=user, name=name, kind="inference", command="serve", gpu_model="h100-80gb",
                      env={"ROTA_HEALTH_PATH": "/health"}, **kw)


def names(team, service="llm"):
    return [j.name for j in service_replicas(team, service)]


def test_scaling_up_copies_the_newest_replica_and_down_cancels_the_highest_numbered(alice, bob, cluster):
    vision = cluster["vision"]
    replica(alice, "llm-1")
    replica(alice, "llm-2", cpus=2)
    replica(alice, "llm-other")  # another service: untouched
    done = service_scale(user=bob, team=vision, service="llm", replicas=4)
    assert done["before"] == 2 and len(done["started"]) == 2
    assert names(vision) == ["llm-1", "llm-2", "llm-3", "llm-4"]
    new = Job.objects.get(name="llm-4")
    assert (new.cpus, new.env, new.submitted_by, new.kind) == (2, {"ROTA_HEALTH_PATH": "/health"}, bob, "inference")
    done = service_scale(user=bob, team=vision, service="llm", replicas=1)
    assert names(vision) == ["llm-1"] and len(done["cancelled"]) == 3
    assert Job.objects.get(name="llm-4").state == "cancelled"
    assert Job.objects.get(name="llm-4").transitions.last().cause == f"scaled by {bob}: llm to 1 replicas"
    entries = list(AuditEntry.objects.filter(action="service.scale").order_by("id").values_list("before", "after"))
    assert [(b["replicas"], a["replicas"]) for b, a in entries] == [(2, 4), (4, 1)]
    assert Job.objects.get(name="llm-other").state == "pending"


def test_scaling_refuses_bad_counts_and_unknown_services_naming_the_field(alice, cluster):
    vision = cluster["vision"]
    replica(alice, "llm")
    for bad in (-1, 17, "3", True):
        with pytest.raises(ValidationError) as exc:
            service_scale(user=alice, team=vision, service="llm", replicas=bad)
        assert "replicas" in exc.value.message_dict and "0 to 16" in exc.value.message_dict["replicas"][0]
    with pytest.raises(ValidationError) as exc:
        service_scale(user=alice, team=vision, service="ghost", replicas=2)
    assert "no inference service ghost" in exc.value.message_dict["service"][0]
    service_scale(user=alice, team=vision, service="llm", replicas=2)
    assert names(vision) == ["llm", "llm-1"]


def test_autoscale_decides_up_at_once_and_down_only_after_the_delay_with_a_margin():
    decide = dict(target=10.0, lowest=1, highest=4, delay_s=60)
    assert autoscale_decide(current=1, rate=25, low_for_s=None, **decide).replicas == 3
    assert autoscale_decide(current=2, rate=100, low_for_s=None, **decide).replicas == 4
    keep = autoscale_decide(current=3, rate=16, low_for_s=None, **decide)  # fits 2 at 8/s: not below 70 %
    assert keep.replicas is None and not keep.low
    low = autoscale_decide(current=3, rate=5, low_for_s=None, **decide)
    assert low.replicas is None and low.low and "waiting 0 of 60 s" in low.why
    assert autoscale_decide(current=3, rate=5, low_for_s=30, **decide).replicas is None
    assert autoscale_decide(current=3, rate=5, low_for_s=60, **decide).replicas == 1
    assert autoscale_decide(current=6, rate=0, low_for_s=None, **decide).replicas == 4


def test_the_autoscaler_measures_the_gateways_rate_and_scales_between_min_and_max(alice, cluster):
    vision = cluster["vision"]
    replica(alice, "llm-1")
    service_autoscale_set(user=alice, team=vision, service="llm", enabled=True, min_replicas=1, max_replicas=3,
                          target_rps=1.0, scale_down_delay_s=0)
    ServiceTraffic.objects.create(team=vision, service="llm", requests=0)
    assert services_autoscale() == ["vision/llm: first sample"]
    InferenceService.objects.update(sampled_at=InferenceService.objects.get().sampled_at - timedelta(seconds=10))
    ServiceTraffic.objects.update(requests=25)  # 2.5 req/s at 1 per replica
    services_autoscale()
    row = InferenceService.objects.get()
    assert names(vision) == ["llm-1", "llm-2", "llm-3"] and "up to 3" in row.last_decision
    assert row.rate_rps == pytest.approx(2.5, rel=0.05)
    InferenceService.objects.update(sampled_at=row.sampled_at - timedelta(seconds=10))
    services_autoscale()  # no new requests: down to min once low (delay 0)
    assert names(vision) == ["llm-1"]
    assert AuditEntry.objects.filter(action="service.scale", actor=None).count() == 2


def test_autoscale_settings_are_checked_and_named(alice, cluster):
    replica(alice, "llm")
    with pytest.raises(ValidationError) as exc:
        service_autoscale_set(user=alice, team=cluster["vision"], service="llm", enabled=True, min_replicas=3,
                              max_replicas=2, target_rps=0)
    assert set(exc.value.message_dict) == {"target_rps"}
    with pytest.raises(ValidationError) as exc:
        service_autoscale_set(user=alice, team=cluster["vision"], service="llm", enabled=True, min_replicas=3,
                              max_replicas=2, target_rps=1)
    assert "at least min_replicas (3)" in exc.value.message_dict["max_replicas"][0]


def test_latency_percentiles_interpolate_within_the_histograms_buckets():
    counts = [0] * len(LATENCY_BUCKETS)
    assert latency_quantile(counts, 0.5) is None
    counts[4] = 10  # ten requests in (0.05, 0.1]
    assert latency_quantile(counts, 0.5) == pytest.approx(0.075)
    counts[-1] = 90
    assert latency_quantile(counts, 0.99) == LATENCY_BUCKETS[-2]


def test_the_gateway_fills_the_histogram_that_the_summary_reads(alice, cluster):
    vision = cluster["vision"]
    for seconds in (0.003, 0.003, 0.2, 7.0):
        ServiceTraffic.record(vision, "llm", failed=seconds > 5, seconds=seconds)
    traffic = service_summary(vision, "llm")["traffic"]
    assert (traffic["requests"], traffic["failed"]) == (4, 1)
    assert traffic["mean_latency_s"] == pytest.approx(7.206 / 4)
    assert 0 < traffic["latency_s"]["p50"] <= 0.005 and 5 < traffic["latency_s"]["p99"] <= 10


def test_the_page_and_api_show_a_service_to_its_team_and_404_to_others(alice, bob, charlie, cluster, client, api):
    job = replica(alice, "llm-1")
    Job.objects.filter(pk=job.pk).update(state="running", service_address="127.0.0.1:30001",
                                         service_health="unhealthy", service_health_message="probe says no")
    client.force_login(bob)
    html = client.get("/services/vision/llm/").content.decode()
    assert "llm-1" in html and "127.0.0.1:30001" in html and "probe says no" in html
    assert client.post("/services/vision/llm/", {"action": "key-create"}).status_code == 302
    assert ServiceKey.objects.filter(team=cluster["vision"], service="llm").count() == 1
    assert client.post("/services/vision/llm/", {"action": "scale", "replicas": "2"}).status_code == 302
    assert names(cluster["vision"]) == ["llm-1", "llm-2"]
    assert "service llm" in client.get("/jobs/").content.decode()
    assert "/services/vision/llm/" in client.get(f"/jobs/{job.pk}/").content.decode()
    body = api(alice).get("/api/v1/services/vision/llm/").json()
    assert [r["name"] for r in body["replicas"]] == ["llm-1", "llm-2"] and body["keys_live"] == 1
    scaled = api(alice).post("/api/v1/services/vision/llm/scale/", {"replicas": 1}, format="json")
    assert scaled.status_code == 200 and len(scaled.json()["cancelled"]) == 1
    bad = api(alice).post("/api/v1/services/vision/llm/scale/", {"replicas": 99}, format="json")
    assert bad.status_code == 400 and "replicas" in bad.json()["errors"]
    auto = api(alice).put("/api/v1/services/vision/llm/autoscale/",
                          {"enabled": True, "min_replicas": 1, "max_replicas": 3, "target_rps": 5}, format="json")
    assert auto.status_code == 200 and InferenceService.objects.get().autoscale

    client.force_login(charlie)
    assert client.get("/services/vision/llm/").status_code == 404
    assert client.post("/services/vision/llm/", {"action": "scale", "replicas": "3"}).status_code == 404
    assert api(charlie).get("/api/v1/services/vision/llm/").status_code == 404
    assert api(charlie).post("/api/v1/services/vision/llm/scale/", {"replicas": 3}, format="json").status_code == 404
    assert names(cluster["vision"]) == ["llm-1"]


def test_a_service_the_team_does_not_have_is_404_on_the_page_the_api_and_its_keys(alice, charlie, client, api):
    replica(alice, "llm-1")
    replica(charlie, "summarizer")  # nlp's service: vision's members hear about it as about a missing one
    job_submit(user=alice, name="trainer", command="train", gpu_model="h100-80gb")  # a job, not a service
    client.force_login(alice)
    for team, service in (("vision", "nope"), ("vision", "trainer"), ("vision", "llm-1x"), ("nlp", "summarizer")):
        base = f"/services/{team}/{service}/"
        assert client.get(base).status_code == 404, base
        assert client.post(base, {"action": "key-create"}).status_code == 404, base
        assert api(alice).get(f"/api/v1{base}").status_code == 404, base
        assert api(alice).get(f"/api/v1{base}keys/").status_code == 404, base
        assert api(alice).post(f"/api/v1{base}keys/").status_code == 404, base
        assert api(alice).delete(f"/api/v1{base}keys/1/").status_code == 404, base
        assert api(alice).post(f"/api/v1{base}scale/", {"replicas": 1}, format="json").status_code == 404, base
        assert api(alice).put(f"/api/v1{base}autoscale/", {"enabled": False}, format="json").status_code == 404
    assert not ServiceKey.objects.exists() and not InferenceService.objects.exists()
    page = client.get("/services/vision/nope/").content.decode()  # the portal's own page, not a bare one
    assert "Not found" in page and "a team you are not a member of" in page and 'href="/jobs/"' in page
    # a service whose replicas all ended still has its page and keys
    Job.objects.filter(name="llm-1").update(state="succeeded")
    assert client.get("/services/vision/llm/").status_code == 200
    assert api(alice).post("/api/v1/services/vision/llm/keys/").status_code == 201


def test_the_gateway_answers_a_key_of_a_service_that_does_not_exist_404_and_no_key_401(alice, client):
    replica(alice, "llm")
    vision = Job.objects.get().team
    _, raw = ServiceKey.issue(vision, "ghost", alice)  # made before keys needed a service
    assert client.get("/serve/vision/ghost/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 404
    assert client.get("/serve/vision/nope/").status_code == 401
    assert client.get("/serve/nlp/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    _, llm = ServiceKey.issue(vision, "llm", alice)
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {llm}").status_code == 503


def test_the_submit_form_refuses_a_health_path_the_probe_could_not_use(alice):
    from tests.scheduler.test_templates import client_for, form_data

    response = client_for(alice).post("/jobs/new/", form_data(kind="inference", name="llm", health_path="ready"))
    assert response.status_code == 200 and not Job.objects.exists()
    assert "must be a path starting with /" in response.content.decode()


def test_the_page_names_the_field_of_a_bad_scale_or_autoscale(alice, cluster, client):
    replica(alice, "llm-1")
    client.force_login(alice)
    page = client.post("/services/vision/llm/", {"action": "scale", "replicas": "99"}, follow=True)
    assert "replicas: Ensure this value is less than or equal to 16." in page.content.decode()
    assert "max_value" not in page.content.decode()  # the message only, never its code
    page = client.post("/services/vision/llm/", {"action": "autoscale", "enabled": "on", "min_replicas": "3",
                                                 "max_replicas": "2", "target_rps": "5",
                                                 "scale_down_delay_s": "60"}, follow=True)
    assert "max_replicas: must be at least min_replicas (3)" in page.content.decode()
    assert names(cluster["vision"]) == ["llm-1"] and not InferenceService.objects.filter(autoscale=True).exists()
