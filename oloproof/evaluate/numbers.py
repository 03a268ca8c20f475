"""Numbers as people write them: "£1,050.00", "1050", "1 050", "1,050" and "1050.0" are one
number (SPEC §18.5, ``normalize: [numbers]``; ``claims_supported`` reads values the same way).

A number in a text is an optional sign, then digits — grouped by threes with one kind of
thousands separator (a comma, a space, a no-break space U+00A0, a narrow no-break space U+202F
or a thin space U+2009), or not grouped — then an optional fraction after a **point**:

* the point is always the decimal point: "1.050" is 1.05, never one thousand and fifty (a
  European "1.050,00" holds no number at all, rather than a wrong one);
* a comma not followed by exactly three digits ends nothing: "45,00" and "1,2345" are no
  numbers (a decimal comma is not read);
* a number glued to a word or to another number is not read: "ORD-123", "5kg", "A1",
  "2024-01-05", "10:30" and "1/2" hold no number (an id, a unit, a date, a time);
* a space between groups of three digits joins them: "2 050" is 2050 (so "on day 3 100
  people" reads 3100 — write such text with other words between the numbers).

A currency symbol (``£ $ € ¥ ₹ ₩ ₽ ¢``) or an ISO code (``EUR``, ``USD``, ``GBP``…) next to a
number, with or without a space, belongs to it and is dropped when the text is normalised; a
sign glued before the currency is the number's ("-£1,050" is -1050, as "£-1,050" is).
Digit runs longer than :data:`MAX_DIGITS` are not read (no number is that long; converting
one would cost time). Numbers are exact decimals (``Decimal``): 0.1 + 0.2 is not read from
any text, and "1050.00" equals 1050 exactly. Every pattern here is linear. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

MAX_DIGITS = 60
#: currency codes read as part of a number next to them
CURRENCY_CODES = ("EUR", "USD", "GBP", "CHF", "JPY", "CAD", "AUD", "NZD", "CNY", "HKD", "SGD", "INR",
                  "SEK", "NOK", "DKK", "PLN", "CZK", "HUF", "ZAR", "BRL", "MXN")
_SYMBOLS = "£$€¥₹₩₽¢"
_SEPARATORS = ", \u00a0\u202f\u2009"

_CURRENCY = rf"(?:[{_SYMBOLS}]|\b(?:{'|'.join(CURRENCY_CODES)})\b)"
# not glued to a word or a number before it (nor to "x-", "x/", "x:": ids, dates, times)
_START = r"(?<![\w.,])(?<!\w[-/:\u2212])"
_DIGITS = rf"(?P<int>\d{{1,3}}(?:(?P<sep>[{_SEPARATORS}])\d{{3}})(?:(?P=sep)\d{{3}})*|\d+)(?P<frac>\.\d+)?"
# not followed by another digit, a separator or point then a digit, a "-", "/" or ":" then a
# digit (a date, a range, a time), or a letter (a unit)
_END = r"(?!\d|[.,:/\-]\d|[A-Za-z_])"
#: a number: an optional sign (not glued to a word either), the digits, the fraction
NUMBER = re.compile(rf"(?:(?<![\w.,])[-+\u2212])?{_START}{_DIGITS}{_END}")
# a sign before the currency ("-£5") is the number's; not after a word or a number ("£5-£6")
_LEAD = r"(?:(?<![\w.,])(?P<lead>[-+\u2212]))?"
#: a number with the currency beside it (what normalisation replaces, and what is read)
_WITH_CURRENCY = re.compile(rf"(?:{_LEAD}{_CURRENCY}[ \u00a0]?)?(?P<number>{NUMBER.pattern})"
                            rf"(?:[ \u00a0]?{_CURRENCY})?")
_ONE = re.compile(rf"\s*(?:{_LEAD}{_CURRENCY}\s?)?(?P<number>{NUMBER.pattern})(?:\s?{_CURRENCY})?\s*")


def _value(m: re.Match[str]) -> Decimal | None:
    text = m.group("number") if "number" in m.re.groupindex else m.group(0)
    sign = -1 if text[0] in "-\u2212" else 1
    lead = m.group("lead") if "lead" in m.re.groupindex else None
    if lead is not None and lead in "-\u2212":
        sign = -sign
    digits = m.group("int")
    if m.group("sep"):
        digits = digits.replace(m.group("sep"), "")
    if len(digits) > MAX_DIGITS:
        return None
    frac = m.group("frac") or ""
    if len(frac) > MAX_DIGITS:
        return None
    value = Decimal(digits + frac)
    return -value if sign < 0 else value


def numbers_in(text: str) -> Iterator[Decimal]:
    """Every number ``text`` holds, in order (module docstring)."""
    for m in _WITH_CURRENCY.finditer(text):
        value = _value(m)
        if value is not None:
            yield value


def read_number(value: Any) -> Decimal | None:
    """``value`` as one number: an int or a finite float (never a bool), or a string that is
    one number and nothing else but a currency and white space ("£1,050.00", " 1 050 ");
    None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if not isinstance(value, str) or len(value) > 4 * MAX_DIGITS:
        return None
    m = _ONE.fullmatch(value)
    return None if m is None else _value(m)


def canonical(number: Decimal) -> str:
    """The canonical text of a number: no exponent, no trailing zeros in the fraction, no
    "-0" (``Decimal("1050.00")`` → ``"1050"``, ``Decimal("0.50")`` → ``"0.5"``)."""
    if number == 0:
        return "0"
    text = format(number, "f")  # built from digits: never an exponent; normalize() would round
    return text.rstrip("0").rstrip(".") if "." in text else text


def normalize_numbers(text: str) -> str:
    """``text`` with every number (and the currency beside it) written canonically:
    "Total: £1,050.00 (was 1 100)" → "Total: 1050 (was 1100)"."""

    def replace(m: re.Match[str]) -> str:
        value = _value(m)
        return m.group(0) if value is None else canonical(value)

    return _WITH_CURRENCY.sub(replace, text)


def as_plain(number: Decimal, fraction: bool) -> int | float | None:
    """``number`` as an int (``fraction`` false: written without one) or a float; None for a
    float beyond range."""
    if not fraction and number == number.to_integral_value():
        return int(number)
    f = float(number)
    return f if math.isfinite(f) else None
