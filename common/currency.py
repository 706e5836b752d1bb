"""ISO 4217: the codes of the currencies in use, for an organization's currency (every amount it shows carries it)."""

from __future__ import annotations

#: Active ISO 4217 alphabetic codes (the standard's list one, without funds, metals and testing codes).
_LISTED = """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF
    CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG
    HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA
    MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD
    RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX
    USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG
"""
CODES = frozenset(_LISTED.split())


def check(code: object) -> str | None:
    """The reason ``code`` is not a currency code, or None when it is one."""
    text = str(code or "").strip()
    if not text:
        return "Name a currency: an ISO 4217 code such as USD or EUR."
    if text.upper() != text or text not in CODES:
        hint = f" (did you mean {text.upper()}?)" if text.upper() in CODES else ""
        return f"{text!r} is not an ISO 4217 currency code{hint}."
    return None
