"""Rota's Django project: settings, URLs, the Celery app, tenancy (teams, members, the access layer)."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
