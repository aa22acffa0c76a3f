"""Personal data for the optional PII redactor: :func:`windowsmith.ingest.redact.redact` with ``pii=True``
(``IngestConfig(redact_pii=True)`` for tool results). Off by default: an agent that books a flight or answers
a customer needs the e-mail address and the phone number it is working with.

What is found (each one pattern, as a :class:`~windowsmith.ingest.redact_rules.RegexRule`, and a check):

* ``email_address``: ``local@domain.tld``; ``git@host`` (an SSH remote) is kept.
* ``phone_number``: ``+`` and 8 to 15 digits (E.164, separators allowed), North American
  ``(415) 555-2671`` / ``415-555-2671`` / ``415.555.2671`` (one separator throughout; no area code starts
  with 0 or 1), UK mobile
  ``07700 900123``. Bare digit runs are not phone numbers (ids, timestamps), nor groups in a list of numbers
  (``0 L 469 531 Q 828 903 1448``, an SVG path).
* ``payment_card``: 13 to 19 digits, contiguous or in groups of four (Amex 4-6-5), whose prefix belongs to a
  card network and whose Luhn check digit is right, not inside a longer list of numbers.
* ``us_ssn``: ``123-45-6789`` (dashes or spaces; the area, group and serial numbers the SSA never issues
  are kept).
* ``uk_nino``: a National Insurance number, ``QQ 12 34 56 C`` (the prefixes HMRC never issues are kept).

The patterns follow the rules of :mod:`windowsmith.ingest.redact_rules`: bounded, no repetition inside
another, a look-behind so a match starts only at a token start.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .redact_rules import RegexRule

__all__ = ["PII_CHECKS", "PII_RULES", "PII_TYPES", "luhn_valid"]

PII_TYPES: tuple[str, ...] = ("email_address", "phone_number", "payment_card", "us_ssn", "uk_nino")
P_PII = 6  # loses every overlap to a secret (a span is (start, end, type, priority), lower wins)

PII_RULES: tuple[RegexRule, ...] = (
    RegexRule(
        "email_address",
        "email_address",
        r"(?<![A-Za-z0-9._%+-])(?P<v>[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@[A-Za-z0-9][A-Za-z0-9.-]{0,252}\.[A-Za-z]{2,24})"
        r"(?![A-Za-z0-9-])",
        P_PII,
        triggers=("@",),
        group="v",
        check="email",
    ),
    RegexRule(
        "phone_international",
        "phone_number",
        r"(?<![\w+])(?P<v>\+[1-9][0-9 ().-]{6,22}[0-9])(?![\w.-])",
        P_PII,
        triggers=("+",),
        group="v",
        check="phone",
    ),
    RegexRule(
        "phone_nanp",
        "phone_number",
        r"(?<![\w.+-])(?<![0-9][ ,])(?P<v>(?:\([2-9][0-9]{2}\)[ ]?|[2-9][0-9]{2}(?P<s>[-.]))[0-9]{3}[-.][0-9]{4})(?![\w.-])"
        r"(?![ ,][0-9])",
        P_PII,
        probe=r"[0-9]{3}[-.)][ ]?[0-9]{3}[-.][0-9]{4}",
        group="v",
        check="phone_nanp",
    ),
    RegexRule(
        "phone_uk_mobile",
        "phone_number",
        r"(?<![\w.+-])(?P<v>07[0-9]{3} [0-9]{3} ?[0-9]{3})(?![\w.-])",
        P_PII,
        triggers=("07",),
        group="v",
    ),
    RegexRule(
        "payment_card",
        "payment_card",
        r"(?<![\w.-])(?<![0-9][ ,])(?P<v>[2-6][0-9]{3}(?P<s>[ -])[0-9]{4}(?P=s)[0-9]{4}(?P=s)[0-9]{4}"
        r"|3[47][0-9]{2}(?P<a>[ -])[0-9]{6}(?P=a)[0-9]{5}|[2-6][0-9]{12,18})(?![\w.-])(?![ ,][0-9])",
        P_PII,
        probe=r"[0-9]{4}",
        group="v",
        check="luhn",
    ),
    RegexRule(
        "us_ssn",
        "us_ssn",
        r"(?<![\w.-])(?P<v>(?!000|666|9)[0-9]{3}(?P<s>[- ])(?!00)[0-9]{2}(?P=s)(?!0000)[0-9]{4})(?![\w.-])",
        P_PII,
        probe=r"[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}",
        group="v",
    ),
    RegexRule(
        "uk_nino",
        "uk_nino",
        r"(?<![A-Za-z0-9])(?P<v>(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]"
        r"(?P<s> ?)[0-9]{2}(?P=s)[0-9]{2}(?P=s)[0-9]{2}(?P=s)[A-D])(?![A-Za-z0-9])",
        P_PII,
        probe=r"[A-Z]{2} ?[0-9]{2}",
        group="v",
    ),
)

#: Card network prefixes (ranges of the first digits) and the lengths each network issues.
_NETWORKS: tuple[tuple[int, int, tuple[int, ...]], ...] = (
    (4, 4, (13, 16, 19)),  # Visa
    (51, 55, (16,)), (2221, 2720, (16,)),  # Mastercard
    (34, 34, (15,)), (37, 37, (15,)),  # American Express
    (6011, 6011, (16, 17, 18, 19)), (644, 649, (16, 17, 18, 19)), (65, 65, (16, 17, 18, 19)),  # Discover
    (3528, 3589, (16, 17, 18, 19)),  # JCB
    (300, 305, (14, 16, 17, 18, 19)), (36, 36, (14, 16, 17, 18, 19)), (38, 39, (16, 17, 18, 19)),  # Diners
    (62, 62, (16, 17, 18, 19)),  # UnionPay
)


_DIGIT = re.compile("[0-9]")


def luhn_valid(digits: str) -> bool:
    """Whether the last digit of ``digits`` is the Luhn check digit of the others."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _check_card(m: re.Match[str]) -> bool:
    text, a, b = m.string, m.start("v"), m.end("v")
    if _DIGIT.search(text, max(0, a - 5), a) or _DIGIT.search(text, b, b + 5):
        return False  # one of many numbers (coordinates, a table of figures), not a card number on its own
    digits = m.group("v").replace(" ", "").replace("-", "")
    if not luhn_valid(digits):
        return False
    for lo, hi, lengths in _NETWORKS:
        prefix = int(digits[: len(str(lo))])
        if lo <= prefix <= hi and len(digits) in lengths:
            return True
    return False


def _check_email(m: re.Match[str]) -> bool:
    local, _, domain = m.group("v").partition("@")
    return local != "git" and ".." not in domain and not domain.startswith(".")


def _check_phone(m: re.Match[str]) -> bool:
    v = m.group("v")
    digits = sum(c.isdigit() for c in v)
    return 8 <= digits <= 15 and "  " not in v and v.count("(") == v.count(")") <= 1


def _check_phone_nanp(m: re.Match[str]) -> bool:
    v = m.group("v")
    sep = m.group("s")
    return sep is None or v[7] == sep  # one separator throughout: 415-555-2671, not 415-555.2671


PII_CHECKS: dict[str, Callable[[re.Match[str]], bool]] = {
    "email": _check_email,
    "luhn": _check_card,
    "phone": _check_phone,
    "phone_nanp": _check_phone_nanp,
}
