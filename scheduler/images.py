"""Container image references and the allow rule: the one place that says what an image reference is and
whether a pool's allow-list admits it. Pure (no Django): the submit check, the snapshot builder (which tells
the engine the pools a job's image may run in) and the Govern pages all call these.

A reference names its registry: ``localhost/rota/python:3.11``, ``registry.example.com:5000/team/train:1.2``,
``registry.example.com/team/train@sha256:…``. A short name such as ``python:3.11`` is refused: the container
runtime would resolve it against whatever search registries the node has, which no allow-list could govern.

An allow-list is a list of patterns, each one of:

* ``registry.example.com/`` or ``registry.example.com/team/`` (ends with ``/``): every image under that prefix;
* a pattern with ``*`` (``localhost/rota/*``, ``registry.example.com/*/eval:*``): ``*`` stands for any text;
* ``localhost/rota/python`` (no tag): every tag and digest of that repository;
* ``localhost/rota/python:3.11`` (a tag or digest): that image only.

An empty list allows nothing (tenancy fails closed).
"""

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

MAX_REFERENCE = 300  # Job.image
MAX_PATTERNS = 50  # per pool
_HOST = r"(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"(?P<registry>{_HOST}(?::[0-9]{{1,5}})?)/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}))?"
)
EXAMPLE = "localhost/rota/python:3.11"
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9._:/@*-]+")


class ImageError(ValueError):
    """An image reference or allow-list pattern that cannot be used; the message says why and how."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed reference: ``registry`` (host[:port]), repository ``path``, and ``tag`` and/or ``digest``."""

    registry: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}"

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def image_parse(reference: str) -> ImageRef:
    """Parse ``reference``; a missing tag and digest means ``latest``, as the container runtime reads it.
    Raises ImageError (with an example) for anything the runtime would not pull from a named registry."""
    text = (reference or "").strip()
    if not text:
        raise ImageError(f"must name an image, e.g. {EXAMPLE}")
    if len(text) > MAX_REFERENCE:
        raise ImageError(f"must be at most {MAX_REFERENCE} characters; got {len(text)}")
    match = REFERENCE.fullmatch(text)
    if match is None or ("." not in match["registry"] and ":" not in match["registry"]
                         and match["registry"] != "localhost"):
        raise ImageError(
            f"{text[:80]!r} is not a full image reference: name the registry, then the repository in lowercase "
            f"and a tag, e.g. {EXAMPLE} or registry.example.com/team/train:1.2 (a short name such as "
            "python:3.11 could be pulled from any registry)")
    tag = match["tag"] or ("" if match["digest"] else "latest")
    return ImageRef(registry=match["registry"].lower(), path=match["path"], tag=tag, digest=match["digest"] or "")


def pattern_check(pattern: str) -> str:
    """The pattern, stripped, its registry in lowercase (as references are read), or ImageError saying what an
    allow-list entry may be."""
    text = (pattern or "").strip()
    if not text or len(text) > MAX_REFERENCE or not _PATTERN_CHARS.fullmatch(text) or "/" not in text:
        raise ImageError(
            f"{text[:80]!r} is not an allow-list entry: use a registry or prefix ending in / "
            "(registry.example.com/), a pattern with * (localhost/rota/*), a repository (localhost/rota/python) "
            f"or one image ({EXAMPLE})")
    registry, _, rest = text.partition("/")
    return f"{registry.lower()}/{rest}"


def image_allowed(image: ImageRef, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether any of ``patterns`` admits ``image`` (see the module's docstring for the pattern forms)."""
    full = str(image)
    for pattern in patterns:
        if pattern.endswith("/"):
            if full.startswith(pattern):
                return True
        elif "*" in pattern:
            if fnmatchcase(full, pattern):
                return True
        elif pattern in (full, image.repository):
            return True
    return False


def pools_allowing(image: ImageRef, allow_lists: dict[str, list[str]]) -> frozenset[str]:
    """The pools (by name) whose allow-list in ``allow_lists`` admits ``image``."""
    return frozenset(pool for pool, patterns in allow_lists.items() if image_allowed(image, patterns))


def image_resolve(image: str, kind: str, kind_defaults: dict[str, str], site_default: str) -> str:
    """The image a job runs in: its own, else its kind's default (set by admins), else the site's."""
    return (image or "").strip() or kind_defaults.get(kind) or site_default
