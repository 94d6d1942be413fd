"""Template context shared by every page."""

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from portal.access import is_finance_only


def navigation(request: HttpRequest) -> dict:
    """What the navigation bar shows the signed-in user (a finance-only user gets accounting alone)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_is_platform_admin": user.is_staff,
            "nav_finance_only": SimpleLazyObject(lambda: is_finance_only(user))}
