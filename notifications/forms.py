"""The notification preferences form: field shapes here, the rules in ``notifications.services``."""

from django import forms

from notifications.models import EVENTS, NotificationPreference
from notifications.services import MAX_PENDING_MINUTES, MAX_WEBHOOK_URL, MIN_PENDING_MINUTES


class PreferenceForm(forms.Form):
    events = forms.MultipleChoiceField(label="Tell me when", required=False, widget=forms.CheckboxSelectMultiple,
                                       choices=list(EVENTS.items()))
    pending_minutes = forms.IntegerField(label="Pending longer than (minutes)", required=False,
                                         min_value=MIN_PENDING_MINUTES,
                                         max_value=MAX_PENDING_MINUTES, initial=60)
    scope = forms.ChoiceField(label="About", choices=NotificationPreference.SCOPES)
    email_enabled = forms.BooleanField(label="By e-mail", required=False)
    webhook_url = forms.CharField(label="Webhook URL", required=False, max_length=MAX_WEBHOOK_URL,
                                  help_text="Slack-compatible JSON, POSTed and signed (X-Rota-Signature); blank: none")
    new_webhook_secret = forms.BooleanField(label="Make a new webhook secret", required=False)
