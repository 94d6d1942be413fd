"""The notifications page: your preferences, your webhook secret, and what you were told (each message
with its deliveries). Only ever the reader's own."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.shortcuts import redirect, render

from notifications.forms import PreferenceForm
from notifications.models import DEFAULT_EVENTS, Delivery
from notifications.services import preference_for, preference_save

RECENT = 50


@login_required
def notifications_page(request):
    pref = preference_for(request.user)
    initial = {"events": pref.events if pref.pk else DEFAULT_EVENTS, "scope": pref.scope,
               "email_enabled": pref.email_enabled, "webhook_url": pref.webhook_url,
               "pending_minutes": pref.pending_minutes}
    form = PreferenceForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            preference_save(user=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, "Notification preferences saved.")
            return redirect("notifications")
    recent = list(request.user.notifications.select_related("job").prefetch_related(
        Prefetch("deliveries", queryset=Delivery.objects.order_by("id")))[:RECENT])
    return render(request, "notifications/page.html", {"form": form, "pref": pref, "recent": recent})
