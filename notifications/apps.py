from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scheduler.signals import jobs_transitioned

        jobs_transitioned.connect(_announce, dispatch_uid="notifications.announce")


def _announce(sender, transitions, **_kwargs) -> None:
    """Once the transitions commit, a Celery task for each works out who is told of it; none is sent for a
    transition nobody asked about (most of them: ``transitions_wanted``, one query here for them all)."""
    from notifications.services import transitions_wanted
    from notifications.tasks import notify_transition

    for transition in transitions_wanted(transitions):
        notify_transition.delay_on_commit(transition.pk)
