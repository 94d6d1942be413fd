"""Typed readers for settings from the environment. A bad value fails loudly at start, naming the variable."""

import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    """The variable's value, or ``default`` when unset."""
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (any case)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer variable within optional bounds."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}; got {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be <= {maximum}; got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks are dropped."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_range(name: str, default: tuple[int, int], *, minimum: int, maximum: int) -> tuple[int, int]:
    """An inclusive range of integers written ``LOW-HIGH`` (e.g. ``20000-29999``) within the bounds."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    low, sep, high = raw.strip().partition("-")
    try:
        bounds = (int(low), int(high)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not minimum <= bounds[0] <= bounds[1] <= maximum:
        raise ImproperlyConfigured(f"{name} must be LOW-HIGH with {minimum} <= LOW <= HIGH <= {maximum}; got {raw!r}")
    return bounds


def env_url(name: str, default: str = "") -> str:
    """An http(s) URL of a server's root (``https://host[:port]``: no user, path, query or fragment), without a
    trailing slash; empty when unset or empty. A user in it would stand in for a node's token (the agent refuses
    to follow such an address), so it is refused here, where the site can see why."""
    raw = os.environ.get(name, default).strip()
    if not raw:
        return ""
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError:
        parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/")
            or parts.query or parts.fragment or "@" in parts.netloc):
        shown = repr(raw) if "@" not in raw else "a URL with a user in it (not shown: it may hold a password)"
        raise ImproperlyConfigured(f"{name} must be an http:// or https:// server root (e.g. "
                                   f"http://10.0.0.5:8002), with no user or path; got {shown}")
    return raw.rstrip("/")
