from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Accounting"

    def ready(self):
        from django.conf import settings

        from accounting import signals  # noqa: F401  (connects the rate card receivers)
        from accounting.idle import POLICIES

        policy = getattr(settings, "ROTA_IDLE_COST_POLICY", "separate")
        if policy not in POLICIES:
            raise ImproperlyConfigured(f"ROTA_IDLE_COST_POLICY must be one of {', '.join(POLICIES)}; got {policy!r}")
