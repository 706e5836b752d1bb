"""The ``qm`` client's connection to the API: where it finds the server and the token (``--url``/``--token``,
``QM_URL``/``QM_TOKEN``, the file ``qm login`` writes), the ``Client`` that calls ``/api/v1/`` with it, and the
error every command raises to be printed (``CliError``, with its exit status). The commands (``qm/cli.py``,
``qm/admin.py``, ``qm/arrays.py``, ``qm/models_cmd.py``, ``qm/services.py``) build on it; it imports none of
them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import requests
import yaml

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT = 30.0
FINAL = frozenset({"succeeded", "failed", "cancelled"})
WAITING = frozenset({"pending", "requeued"})
OK, FAILED, BAD_INPUT = 0, 1, 2


class CliError(Exception):
    """Something to tell the user on stderr, with the exit status to leave with."""

    def __init__(self, message: str, fields: Mapping[str, Any] | None = None, status: int = FAILED) -> None:
        super().__init__(message)
        self.message, self.fields, self.status = message, dict(fields or {}), status


# ------------------------------------------------------------------------------------------ settings


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "quartermaster" / "config.yaml"


def load_config() -> dict[str, Any]:
    path = config_path()
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as error:
        raise CliError(f"Cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} is not a mapping of url and token; run `qm login` again.")
    return data


def save_config(url: str, token: str) -> Path:
    """Write url and token where only this user can read them (the folder 0700, the file 0600)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file may have had looser permissions
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump({"url": url, "token": token}, handle, default_flow_style=False)
    return path


@dataclass
class Settings:
    url: str
    token: str | None
    out: TextIO = field(default_factory=lambda: sys.stdout)


def settings_from(args: argparse.Namespace) -> Settings:
    config = load_config()
    url = (getattr(args, "url", None) or os.environ.get("QM_URL") or config.get("url") or DEFAULT_URL).rstrip("/")
    token = getattr(args, "token", None) or os.environ.get("QM_TOKEN")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"The server's URL must start with http:// or https://, not {url!r}.", status=BAD_INPUT)
    if not token and str(config.get("url", "")).rstrip("/") == url:
        token = config.get("token")
    return Settings(url, token)


# -------------------------------------------------------------------------------------------- client


class Client:
    """The API at ``url`` with a bearer token; an error answer becomes a ``CliError`` with its fields."""

    def __init__(self, url: str, token: str | None, *, refused_hint: str = "run `qm login`, or check QM_TOKEN") -> None:
        self.url, self.token, self.refused_hint = url, token, refused_hint
        self.session = requests.Session()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, Any]:
        sent = {"Accept": "application/json", **(headers or {})}
        if auth:
            if not self.token:
                raise CliError(f"Not signed in to {self.url}: run `qm login`, or set QM_TOKEN.")
            sent["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body, default=str).encode()
            sent["Content-Type"] = "application/json"
        try:
            response = self.session.request(
                method, f"{self.url}/api/v1/{path}", data=data, params=params, headers=sent, timeout=TIMEOUT
            )
        except requests.RequestException as error:
            raise CliError(f"Cannot reach {self.url}: {type(error).__name__}.") from None
        try:
            answer = response.json() if response.content else None
        except ValueError:
            answer = None
        if response.status_code >= 400:
            raise self._error(response.status_code, answer, path)
        return response.status_code, answer

    def _error(self, status: int, answer: Any, path: str) -> CliError:
        error = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(error, dict):
            return CliError(f"{self.url} answered HTTP {status}; is it a Quartermaster server?")
        message = str(error.get("message") or f"HTTP {status}")
        if status == 404 and path.startswith("jobs/") and error.get("code") == "not_found":
            message = f"No job {path.split('/')[1]}, or not one you may see."
        elif status == 401:
            message = f"{message} The server refused the token: {self.refused_hint}."
        return CliError(message, error.get("fields") or {}, BAD_INPUT if status == 400 else FAILED)

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.call("GET", path, params=params)[1]

    def pages(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """A paginated list's answers, page after page. Pages are asked for by number rather than through
        the answer's ``next`` link, so the token only ever goes to ``url``."""
        page = 1
        while True:
            answer = self.get(path, {**(params or {}), "page": page})
            yield answer
            if not answer.get("next"):
                return
            page += 1

    def rows(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        for answer in self.pages(path, params):
            yield from answer["results"]


def field_messages(value: Any, prefix: str = "") -> Iterator[str]:
    """Field messages, nested ones (``env: DEBUG: Not a string.``) flattened."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from field_messages(inner, f"{prefix}{key}: ")
    elif isinstance(value, list):
        for item in value:
            yield from field_messages(item, prefix)
    else:
        yield f"{prefix}{value}"
