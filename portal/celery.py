"""The Celery application: Redis broker, tasks discovered from the Django apps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("rota")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
