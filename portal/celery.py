"""The Celery application: Redis broker, tasks discovered from the Django apps."""

import os

from celery import Celery
from celery.contrib.django.task import DjangoTask

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


class Task(DjangoTask):
    """Messages are hints (DESIGN.md, principle 2): a wake-up that cannot reach the broker after the commit
    is logged, not raised into a request whose transaction already committed (beat runs the work anyway)."""

    def delay_on_commit(self, *args, **kwargs) -> None:
        from django.db import transaction

        def wake_up():
            self.delay(*args, **kwargs)

        transaction.on_commit(wake_up, robust=True)


app = Celery("rota", task_cls=Task)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
