"""Settings come from environment variables, parsed strictly, with embedded defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choice, env_int, env_list, env_networks, env_ports, env_str

ROOT = Path(__file__).resolve().parents[2]


def test_bool_accepts_the_usual_spellings_and_refuses_others(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, expected in [("true", True), ("YES", True), ("1", True), ("off", False), ("0", False)]:
        monkeypatch.setenv("QM_FLAG", raw)
        assert env_bool("QM_FLAG", not expected) is expected
    monkeypatch.setenv("QM_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="QM_FLAG='maybe' is not a boolean"):
        env_bool("QM_FLAG", False)
    monkeypatch.delenv("QM_FLAG")
    assert env_bool("QM_FLAG", True) is True


def test_int_list_choice_and_file_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("QM_N", "12x")
    with pytest.raises(ImproperlyConfigured, match="QM_N='12x' is not an integer"):
        env_int("QM_N", 1)
    monkeypatch.setenv("QM_N", "-1")
    with pytest.raises(ImproperlyConfigured, match="QM_N=-1 must be at least 0"):
        env_int("QM_N", 1, minimum=0)
    monkeypatch.setenv("QM_HOSTS", " a.example, ,b.example ")
    assert env_list("QM_HOSTS", []) == ["a.example", "b.example"]
    monkeypatch.setenv("QM_MODE", "prod")
    with pytest.raises(ImproperlyConfigured, match=r"QM_MODE='prod' must be one of: dev, production"):
        env_choice("QM_MODE", "dev", ("dev", "production"))
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("QM_PASSWORD", "from-env")
    monkeypatch.setenv("QM_PASSWORD_FILE", str(secret))
    assert env_str("QM_PASSWORD") == "s3cret"
    monkeypatch.setenv("QM_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match=r"QM_PASSWORD_FILE=.* cannot be read"):
        env_str("QM_PASSWORD")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run manage.py in a fresh process with `env` on top of a clean environment."""
    base = {key: value for key, value in os.environ.items() if not key.startswith(("QM_", "DJANGO_"))}
    for key in ("SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        base.pop(key, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_port_ranges_and_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert env_ports("QM_TEST_PORTS", (20000, 29999)) == (20000, 29999)
    monkeypatch.setenv("QM_TEST_PORTS", "31000-31099")
    assert env_ports("QM_TEST_PORTS", (20000, 29999)) == (31000, 31099)
    assert env_networks("QM_TEST_NETWORKS") == ()
    monkeypatch.setenv("QM_TEST_NETWORKS", " 10.20.0.0/16, fd00::/64 ,")
    assert [str(n) for n in env_networks("QM_TEST_NETWORKS")] == ["10.20.0.0/16", "fd00::/64"]


def test_embedded_defaults_need_nothing(tmp_path: Path) -> None:
    script = (
        "from django.conf import settings as s; "
        "print(s.DATABASES['default']['NAME'], s.CELERY_BROKER_URL, s.DEBUG, s.TIME_ZONE)"
    )
    result = manage("shell", "--no-imports", "-c", script, QM_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tmp_path / "quartermaster.sqlite3"), "filesystem://", "False", "UTC"]
    key = (tmp_path / "secret_key").read_text()
    assert len(key) >= 50
    assert oct((tmp_path / "secret_key").stat().st_mode & 0o777) == "0o600"


def test_production_requires_a_secret_key(tmp_path: Path) -> None:
    result = manage("check", QM_ENV="production", ALLOWED_HOSTS="qm.example.org", QM_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "SECRET_KEY must be set when QM_ENV=production" in result.stderr


def test_production_passes_check_deploy(tmp_path: Path) -> None:
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        QM_ENV="production",
        SECRET_KEY="x7#" * 20 + "production-grade-key",
        ALLOWED_HOSTS="qm.example.org",
        QM_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "sometimes"}, "DEBUG='sometimes' is not a boolean"),
        ({"QM_ENV": "staging"}, "QM_ENV='staging' must be one of"),
        ({"DATABASE_URL": "nosuchdb://x"}, "DATABASE_URL"),
        ({"EMAIL_PORT": "smtp"}, "EMAIL_PORT='smtp' is not an integer"),
        ({"SERVE_REPLICA_PORTS": "80-90"}, "SERVE_REPLICA_PORTS='80-90' is not a port range FIRST-LAST within 1024"),
        ({"SERVE_REPLICA_PORTS": "30000-20000"}, "SERVE_REPLICA_PORTS='30000-20000' is not a port range"),
        ({"REPLICAS_NETWORKS": "10.0.0.0/8,nodes"}, "REPLICAS_NETWORKS: 'nodes' is not a network in CIDR notation"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_variable(tmp_path: Path, env: dict[str, str], message: str) -> None:
    result = manage("check", QM_VAR_DIR=str(tmp_path), **env)
    assert result.returncode != 0
    assert message in result.stderr


STRONG_KEY = "x7#" * 20 + "production-grade-key"


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("short-but-varied-key-0123456789", "it has 31 characters, fewer than 50"),
        ("ab" * 40, "fewer than 5 different characters"),
        ("django-insecure-" + "k3y#" * 12, "it starts with 'django-insecure-'"),
    ],
)
def test_production_refuses_a_weak_secret_key(tmp_path: Path, key: str, problem: str) -> None:
    """Weak as ``check --deploy`` means it (security.W009); production stops instead of warning."""
    result = manage(
        "check", QM_ENV="production", SECRET_KEY=key, ALLOWED_HOSTS="qm.example.org", QM_VAR_DIR=str(tmp_path)
    )
    assert result.returncode != 0
    assert "SECRET_KEY is too weak for QM_ENV=production" in result.stderr
    assert problem in result.stderr
    assert key not in result.stderr  # the message names the variable, never its value
    result = manage(
        "check",
        QM_ENV="production",
        SECRET_KEY=STRONG_KEY,
        CREDENTIALS_KEY=key,
        ALLOWED_HOSTS="qm.example.org",
        QM_VAR_DIR=str(tmp_path),
    )
    assert "CREDENTIALS_KEY is too weak for QM_ENV=production" in result.stderr


def test_a_weak_key_is_fine_outside_production_and_debug_is_refused_in_it(tmp_path: Path) -> None:
    result = manage("check", SECRET_KEY="dev", DEBUG="true", QM_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    result = manage(
        "check",
        QM_ENV="production",
        SECRET_KEY=STRONG_KEY,
        DEBUG="true",
        ALLOWED_HOSTS="qm.example.org",
        QM_VAR_DIR=str(tmp_path),
    )
    assert result.returncode != 0
    assert "DEBUG=true is not allowed when QM_ENV=production" in result.stderr
