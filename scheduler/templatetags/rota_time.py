"""Template filters for times relative to now, in the words the scheduler's reasons use."""

from django import template
from django.utils import timezone

from scheduler.core.reasons import fmt_duration

register = template.Library()


@register.filter
def from_now(value):
    """ "in 50 s", "in 12 min", "in 3 h 20 min" for a future moment; "now" once it has passed."""
    if value is None:
        return ""
    seconds = (value - timezone.now()).total_seconds()
    return "in " + fmt_duration(seconds) if seconds >= 0.5 else "now"


@register.filter
def ago(value):
    """ "12 s ago", "3 min ago", "2 h 5 min ago" for a past moment (to the second, unlike ``timesince``)."""
    if value is None:
        return "never"
    seconds = (timezone.now() - value).total_seconds()
    return fmt_duration(seconds) + " ago" if seconds >= 0.5 else "just now"
