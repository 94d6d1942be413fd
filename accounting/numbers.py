"""Numbers for people: one rounding rule for the dashboard's tiles, tables and chart labels and the PDF statements,
so that a small amount never reads as zero beside a cost it caused. Pure (no Django).

* **Quantities** (hours, GPU-hours, GPUs, minutes): ``places`` decimals from 1 up; below 1, two significant
  digits (``0.023``, ``0.50``); below 0.001, ``<0.001``; zero as ``0``.
* **Money**: cents, rounded half up as the ledger rounds; a non-zero amount under half a cent as ``<0.01``.
* **Ratios** as whole percent; a non-zero ratio under half a percent as ``<1%``.
"""

from decimal import ROUND_HALF_UP, Decimal

SMALLEST = Decimal("0.001")
CENT = Decimal("0.01")


def _decimal(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _grouped(text: str, grouping: bool) -> str:
    if not grouping:
        return text
    whole, _, frac = text.partition(".")
    return f"{int(whole):,}" + (f".{frac}" if frac else "")


def quantity(value, places: int = 1, *, grouping: bool = False) -> str:
    """``value`` (a number, or None for "n/a") with ``places`` decimals, or enough to be non-zero below 1."""
    if value is None or value == "":
        return "n/a"
    d = _decimal(value)
    if d == 0:
        return "0"
    sign, a = ("-" if d < 0 else ""), abs(d)
    if a < SMALLEST:
        return f"{sign}<{SMALLEST}"
    if a < 1:
        small = a.quantize(Decimal(1).scaleb(a.adjusted() - 1), rounding=ROUND_HALF_UP)
        if small < 1:
            return f"{sign}{small:f}"
    whole = a.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return sign + _grouped(f"{whole:f}", grouping)


def money(value, *, grouping: bool = False) -> str:
    """``value`` in cents (half up); ``<0.01`` for a non-zero amount that rounds to nothing."""
    if value is None or value == "":
        return "n/a"
    d = _decimal(value)
    cents = abs(d).quantize(CENT, rounding=ROUND_HALF_UP)
    sign = "-" if d < 0 else ""
    if cents == 0:
        return f"{sign}<{CENT}" if d != 0 else "0.00"
    return sign + _grouped(f"{cents:f}", grouping)


def percent(ratio) -> str:
    """``ratio`` (1.0 = 100%) as whole percent; ``<1%`` when non-zero but under half a percent; None: n/a."""
    if ratio is None or ratio == "":
        return "n/a"
    pct = _decimal(ratio) * 100
    whole = abs(pct).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    if whole == 0 and pct != 0:
        return "<1%" if pct > 0 else "-<1%"
    return f"{'-' if pct < 0 else ''}{whole:f}%"
