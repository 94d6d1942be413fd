from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler.signals import job_transitioned

        job_transitioned.connect(_announce, dispatch_uid="notifications.announce")


def _announce(sender, transition, **_kwargs) -> None:
    """Once the transition commits, a Celery task works out who is told of it; none is sent for a transition
    nobody asked about (most of them: ``transition_wanted``, one query here)."""
    from notifications.services import transition_wanted
    from notifications.tasks import notify_transition

    if transition_wanted(transition):
        notify_transition.delay_on_commit(transition.pk)
