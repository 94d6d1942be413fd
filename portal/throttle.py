"""What django-axes counts failed logins under."""

from django.contrib.auth import get_user_model

USERNAME_MAX = get_user_model()._meta.get_field("username").max_length  # 150


def axes_username(request, credentials: dict | None = None) -> str | None:
    """The username a login tried, cut to the longest a username can be: a longer one names no account, and
    axes stores it in a 255-character column (a 256-character name at the login form was a 500)."""
    if credentials:
        value = credentials.get("username")
    else:
        value = getattr(request, "data", request.POST).get("username")
    return value[:USERNAME_MAX] if isinstance(value, str) else value
