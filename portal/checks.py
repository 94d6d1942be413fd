"""Django system checks of Rota's own settings (``manage.py check``; the deploy-tagged ones with ``--deploy``)."""

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.security, deploy=True)
def isolation_required(app_configs, **kwargs) -> list[Error]:
    """A deployment shares nodes between teams: it must refuse nodes whose executor does not isolate them."""
    if settings.ROTA_REQUIRE_ISOLATION:
        return []
    return [Error(
        "ROTA_REQUIRE_ISOLATION is off: nodes may register with the process executor, which runs every team's "
        "jobs as plain processes without an image, cgroup limits or a container around them",
        hint="set ROTA_REQUIRE_ISOLATION=1 (portal.settings_production's default) and run node agents with the "
             "container executor (Podman)", id="rota.E001")]


@register()
def default_image_usable(app_configs, **kwargs) -> list[Error]:
    """The site's default image must be a full reference: every job that names no image runs in it."""
    from scheduler.images import ImageError, image_parse

    try:
        image_parse(settings.ROTA_DEFAULT_IMAGE)
    except ImageError as exc:
        return [Error(f"ROTA_DEFAULT_IMAGE: {exc}", id="rota.E002")]
    return []
