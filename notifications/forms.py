"""The notification preferences form: field shapes here, the rules in ``notifications.services``."""

from django import forms

from notifications.models import EVENTS, NotificationPreference
from notifications.services import MAX_WEBHOOK_URL


class PreferenceForm(forms.Form):
    events = forms.MultipleChoiceField(label="Tell me when", required=False, widget=forms.CheckboxSelectMultiple,
                                       choices=list(EVENTS.items()))
    scope = forms.ChoiceField(label="About", choices=NotificationPreference.SCOPES)
    email_enabled = forms.BooleanField(label="By e-mail", required=False)
    webhook_url = forms.CharField(label="Webhook URL", required=False, max_length=MAX_WEBHOOK_URL,
                                  help_text="Slack-compatible JSON, POSTed and signed (X-Rota-Signature); blank: none")
    new_webhook_secret = forms.BooleanField(label="Make a new webhook secret", required=False)
