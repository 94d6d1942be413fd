from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from portal import checks  # noqa: F401  (registers Rota's system checks)
