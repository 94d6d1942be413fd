"""Template context shared by every page."""

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import SimpleLazyObject

from portal.access import is_finance_only


def navigation(request: HttpRequest) -> dict:
    """What the navigation bar shows the signed-in user (a finance-only user gets accounting alone)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_is_platform_admin": user.is_staff,
            "nav_finance_only": SimpleLazyObject(lambda: is_finance_only(user)),
            "scheduler_stalled": SimpleLazyObject(scheduler_stalled),
            "TIME_ZONE_NAME": timezone.get_current_timezone_name()}  # every page says which zone its times are in


def scheduler_stalled() -> str:
    """How long ago the last scheduling cycle completed, when that is much longer than its interval (the
    Celery worker or beat has stopped: waiting jobs will not start); "" otherwise, and before any cycle."""
    from scheduler.core.reasons import fmt_duration
    from scheduler.models import SchedulerBeat

    last = SchedulerBeat.objects.filter(name=SchedulerBeat.CYCLE).values_list("at", flat=True).first()
    if last is None:
        return ""
    late = (timezone.now() - last).total_seconds()  # the web host's clock: skew is far below the threshold
    return fmt_duration(late) if late > stall_after_s() else ""


def stall_after_s() -> float:
    """A cycle older than this means the scheduler has stopped (six intervals, at least a minute)."""
    return max(60.0, 6.0 * settings.ROTA_CYCLE_INTERVAL_S)
