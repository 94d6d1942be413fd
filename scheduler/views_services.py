"""The service page ``/services/<team>/<service>/``: an inference service's replicas (node, address, health,
restarts and why), its traffic (requests, failures, mean and percentile latency), its API keys (create,
revoke), its replica count (changed while it runs) and its autoscale. Members of the team only (others 404); a
service the team does not have is 404 too."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render

from scheduler.selectors_services import service_of_member, service_summary
from scheduler.services import inference
from scheduler.services import service_keys as keys


class ScaleForm(forms.Form):
    replicas = forms.IntegerField(min_value=0, max_value=inference.MAX_REPLICAS)


class AutoscaleForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Autoscale on")
    min_replicas = forms.IntegerField(min_value=1, max_value=inference.MAX_REPLICAS, initial=1)
    max_replicas = forms.IntegerField(min_value=1, max_value=inference.MAX_REPLICAS, initial=1)
    target_rps = forms.FloatField(min_value=0.001, max_value=inference.MAX_TARGET_RPS, initial=10,
                                  label="Target requests/s per replica")
    scale_down_delay_s = forms.IntegerField(min_value=0, max_value=inference.MAX_SCALE_DOWN_DELAY_S, initial=60,
                                            label="Scale down after (s)")


def _act(request, team, service) -> bool:
    """Do the POSTed action; True when it worked (then the page is shown again by a redirect)."""
    action = request.POST.get("action")
    try:
        if action == "scale":
            form = ScaleForm(request.POST)
            if not form.is_valid():
                raise ValidationError(form.errors.as_data())
            done = inference.service_scale(user=request.user, team=team, service=service,
                                           replicas=form.cleaned_data["replicas"])
            messages.success(request, f"{service}: {done['before']} -> {done['replicas']} replicas "
                                      f"({len(done['started'])} started, {len(done['cancelled'])} cancelled).")
        elif action == "autoscale":
            form = AutoscaleForm(request.POST)
            if not form.is_valid():
                raise ValidationError(form.errors.as_data())
            row = inference.service_autoscale_set(user=request.user, team=team, service=service,
                                                  **form.cleaned_data)
            messages.success(request, f"Autoscale {'on' if row.autoscale else 'off'} for {service}.")
        elif action == "key-create":
            _, raw = keys.service_key_create(user=request.user, team=team, service=service)
            messages.success(request, f"New key (shown this once): {raw}")
        elif action == "key-revoke":
            key = keys.service_key_revoke(team=team, service=service, key_id=int(request.POST.get("key_id", 0)))
            messages.success(request, f"Key {key.prefix}… revoked.")
        else:
            raise ValidationError({"action": "must be scale, autoscale, key-create or key-revoke"})
    except ValidationError as exc:
        for field, errors in (exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}).items():
            for text in errors:
                messages.error(request, f"{field}: {text}" if field else text)
        return False
    return True


@login_required
def service_detail(request, team: str, service: str):
    found = service_of_member(request.user, team, service)
    if request.method == "POST":
        _act(request, found, service)
        return redirect("service-detail", team=found.name, service=service)
    summary = service_summary(found, service)
    scale = summary["autoscale"]
    return render(request, "services/detail.html", {
        "summary": summary, "team": found, "service": service,
        "keys": keys.service_keys(found, service),
        "scale_form": ScaleForm(initial={"replicas": len(summary["replicas"])}),
        "autoscale_form": AutoscaleForm(initial={"enabled": scale["enabled"], "min_replicas": scale["min_replicas"],
                                                 "max_replicas": scale["max_replicas"],
                                                 "target_rps": scale["target_rps"],
                                                 "scale_down_delay_s": scale["scale_down_delay_s"]}),
    })
