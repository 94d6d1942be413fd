from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler.signals import job_transitioned

        job_transitioned.connect(_announce, dispatch_uid="notifications.announce")


def _announce(sender, transition, **_kwargs) -> None:
    """Once the transition commits, a Celery task works out who asked to hear of it (nothing waits here)."""
    from notifications.services import event_of
    from notifications.tasks import notify_transition

    if event_of(transition.from_state, transition.to_state):
        notify_transition.delay_on_commit(transition.pk)
