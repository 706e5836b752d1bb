"""Strict parsers for settings read from environment variables.

Every parser names the variable in its error, so a typo in a deployment fails at start-up with a message
that says what to fix instead of silently falling back to a default. A variable `NAME_FILE` may point at a
file holding the value (Docker and Kubernetes secrets), and wins over `NAME`.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlsplit

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str | None = None) -> str | None:
    """The raw value of `name` (or the contents of the file `name_FILE` points at), else `default`."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean; use one of true/false, yes/no, on/off, 1/0")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blank items are dropped."""
    value = env_str(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_ports(name: str, default: tuple[int, int]) -> tuple[int, int]:
    """A range of TCP ports ``FIRST-LAST``, both included, within 1024-65535."""
    value = env_str(name)
    if value is None:
        return default
    first, _, last = value.partition("-")
    if not (first.strip().isdigit() and last.strip().isdigit()) or not 1024 <= int(first) <= int(last) <= 65535:
        raise ImproperlyConfigured(f"{name}={value!r} is not a port range FIRST-LAST within 1024-65535")
    return int(first), int(last)


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of networks in CIDR notation (``10.20.0.0/16,fd00::/64``); empty when unset."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not a network in CIDR notation (10.20.0.0/16)") from None
    return tuple(networks)


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    assert value is not None
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value


def require_strong_secret(name: str, value: str) -> None:
    """Refuse a secret key that ``manage.py check --deploy`` would call weak (security.W009): too short, too
    few distinct characters, or one of Django's generated development keys. Production starts only with a
    strong one; a warning in a log nobody reads protects nothing."""
    problems = []
    if len(value) < SECRET_KEY_MIN_LENGTH:
        problems.append(f"it has {len(value)} characters, fewer than {SECRET_KEY_MIN_LENGTH}")
    if len(set(value)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        problems.append(f"it has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} different characters")
    if value.startswith(SECRET_KEY_INSECURE_PREFIX):
        problems.append(f"it starts with {SECRET_KEY_INSECURE_PREFIX!r}, the mark of a development key")
    if problems:
        raise ImproperlyConfigured(
            f"{name} is too weak for QM_ENV=production: {'; '.join(problems)}. Generate a long random one, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )


def env_url(name: str, *, https_only: bool) -> str | None:
    """An absolute http(s) URL, or None when unset; `https_only` refuses plain http (production)."""
    value = env_str(name)
    if value is None:
        return None
    parsed = urlsplit(value.strip())
    schemes = ("https",) if https_only else ("http", "https")
    if parsed.scheme not in schemes or not parsed.hostname:
        raise ImproperlyConfigured(f"{name}={value!r} is not an absolute {' or '.join(schemes)} URL")
    return value.strip()
