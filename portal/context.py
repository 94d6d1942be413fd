"""Template context shared by every page."""

from django.http import HttpRequest


def navigation(request: HttpRequest) -> dict:
    """The signed-in user's teams for the navigation bar."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_is_platform_admin": user.is_staff}
