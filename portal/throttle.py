"""Throttles: what django-axes counts failed logins under, and the per-person limit on quotes."""

from django.contrib.auth import get_user_model
from rest_framework.throttling import UserRateThrottle

USERNAME_MAX = get_user_model()._meta.get_field("username").max_length  # 150


def axes_username(request, credentials: dict | None = None) -> str | None:
    """The username a login tried, cut to the longest a username can be: a longer one names no account, and
    axes stores it in a 255-character column (a 256-character name at the login form was a 500)."""
    if credentials:
        value = credentials.get("username")
    else:
        value = getattr(request, "data", request.POST).get("username")
    return value[:USERNAME_MAX] if isinstance(value, str) else value


class QuoteThrottle(UserRateThrottle):
    """Quotes per person, API and submit form together (``DEFAULT_THROTTLE_RATES["quote"]``): each one reads
    the whole cluster and runs a scheduling cycle (about 0.6 s of the web server's CPU with 10,000 jobs
    waiting), so a script quoting in a loop could take a web worker for itself. The form asks once a change,
    300 ms after the last one; a person at the form stays far below the limit."""

    scope = "quote"

    def refusal(self, wait: float | None = None) -> str:
        """What a person past the limit is told (``wait``: seconds until the next quote, else this throttle's)."""
        wait = self.wait() if wait is None else wait
        return f"too many quotes: at most {self.rate}; try again in {max(1, round(wait or 1))} s"
