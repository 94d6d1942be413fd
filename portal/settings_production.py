"""Production settings: ``DJANGO_SETTINGS_MODULE=portal.settings_production``. DEBUG is off whatever the
environment says, so SECRET_KEY must be a real one (portal.settings refuses a missing or default key);
cookies are secure, HTTPS is enforced with HSTS. ``manage.py check --deploy`` is clean under these."""

import os
from pathlib import Path

os.environ["DEBUG"] = "0"

from portal.env import env_bool, env_int, env_str  # noqa: E402
from portal.settings import *  # noqa: E402, F403

DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Tenants share nodes: a node whose executor does not isolate them (the process executor) may not register.
ROTA_REQUIRE_ISOLATION = env_bool("ROTA_REQUIRE_ISOLATION", True)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (opt in: trusting it without a proxy is unsafe).
if env_bool("SECURE_PROXY_SSL", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Throttles (quotes per person, node API calls) count in the cache: one cache for every web worker, in Redis
# (Django's default keeps a cache per process, so N workers would allow N times the rate).
if REDIS_URL.startswith(("redis://", "rediss://", "unix://")):  # noqa: F405
    CACHES = {"default": {"BACKEND": "portal.cache.RedisCache", "LOCATION": REDIS_URL,  # noqa: F405
                          "KEY_PREFIX": "rota"}}

# Connections: each web thread and worker keeps its PostgreSQL connection between requests (checked before
# reuse, so a restarted server costs one failed check, not a failed request).
DATABASES["default"]["CONN_MAX_AGE"] = env_int("ROTA_DB_CONN_MAX_AGE", 600, minimum=0)  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405

# Static files: collected once (``manage.py collectstatic``, which ``make serve`` runs) under hashed names,
# compressed, and served by WhiteNoise from memory-mapped files with far-future cache headers.
STATIC_ROOT = Path(env_str("ROTA_STATIC_ROOT", str(BASE_DIR / "staticfiles")))  # noqa: F405
WHITENOISE_USE_FINDERS = False
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
