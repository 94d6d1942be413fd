"""ASGI entry point (``make serve``: gunicorn's uvicorn workers; ``make dev``: uvicorn): ``/notebooks/…``,
HTTP and websockets, goes to the notebook proxy (``scheduler.notebook_proxy``); everything else to Django,
as under WSGI (``portal/wsgi.py``). With DEBUG on, static files are served as ``runserver`` serves them."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_app = get_asgi_application()  # sets Django up before the imports below

from django.conf import settings  # noqa: E402

from scheduler import notebook_proxy  # noqa: E402

if settings.DEBUG and "django.contrib.staticfiles" in settings.INSTALLED_APPS:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_app = ASGIStaticFilesHandler(django_app)


async def application(scope, receive, send):
    """Route one connection: the notebook proxy for its prefix, Django for the rest (and lifespan events)."""
    if scope["type"] in ("http", "websocket") and scope["path"].startswith(notebook_proxy.PREFIX):
        await notebook_proxy.app(scope, receive, send)
    elif scope["type"] == "websocket":  # Django serves no websockets
        await receive()
        await send({"type": "websocket.close", "code": 1000})
    elif scope["type"] == "lifespan":  # nothing to set up or tear down (Django's handler refuses lifespan)
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    else:
        await django_app(scope, receive, send)
