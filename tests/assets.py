"""Pages ship every browser asset: nothing is loaded from another host (no CDN)."""

import re

_EXTERNAL = re.compile(r'(?:src|href)\s*=\s*["\']?((?:https?:)?//[^"\'\s>]+)', re.IGNORECASE)


def external_assets(html: str) -> list[str]:
    """Addresses on other hosts that ``html`` loads or links (script, style, image or link)."""
    return _EXTERNAL.findall(html)
