"""Production settings: ``DJANGO_SETTINGS_MODULE=portal.settings_production``. DEBUG is off whatever the
environment says, so SECRET_KEY must be a real one (portal.settings refuses a missing or default key);
cookies are secure, HTTPS is enforced with HSTS. ``manage.py check --deploy`` is clean under these."""

import os

os.environ["DEBUG"] = "0"

from portal.env import env_bool, env_int  # noqa: E402
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
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,  # noqa: F405
                          "KEY_PREFIX": "rota"}}
