"""Production settings and the compose file: what can be checked without a Docker engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "-production-like-secret-key-with-enough-entropy-0123456789",
    "CREDENTIALS_KEY": "ZmFrZS1rZXktZm9yLXRlc3RzLW9ubHktMzItYnl0ZXM=",
    "ALLOWED_HOSTS": "redrive.example.org",
    "CSRF_TRUSTED_ORIGINS": "https://redrive.example.org",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    # The browser tests' DJANGO_ALLOW_ASYNC_UNSAFE is for this test process only.
    clean = {k: v for k, v in os.environ.items()
             if k not in PRODUCTION_ENV and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_with_production_like_settings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {**PRODUCTION_ENV, "SECRET_KEY": ""}
    result = run_manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_production_refuses_to_start_without_a_credentials_key():
    env = {**PRODUCTION_ENV, "CREDENTIALS_KEY": ""}
    result = run_manage("check", env=env)
    assert result.returncode != 0
    assert "CREDENTIALS_KEY must be set" in result.stderr


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_has_every_service_with_a_healthcheck():
    """Docker cannot run here; this checks the file parses and is complete."""
    services = compose()["services"]
    assert set(services) == {"web", "worker", "beat", "rocketmq-scheduler", "postgres", "redis",
                             "rabbitmq", "pulsar"}
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_compose_commands_point_at_what_the_project_has():
    services = compose()["services"]
    web = services["web"]["command"]
    assert "gunicorn console.wsgi:application" in web
    assert (ROOT / "console" / "wsgi.py").exists()
    assert "manage.py migrate" in web and "manage.py collectstatic" in web
    for name in ("worker", "beat"):
        assert services[name]["command"].startswith("celery -A console ")
    assert (ROOT / "console" / "celery.py").exists()
    scheduler = services["rocketmq-scheduler"]["command"].split()
    assert scheduler[:2] == ["python", "manage.py"]
    assert (ROOT / "console" / "runner" / "management" / "commands" / f"{scheduler[2]}.py").exists()
    # Every Redrive service gets the production settings.
    for name in ("web", "worker", "beat", "rocketmq-scheduler"):
        env = services[name]["environment"]
        assert env["DEBUG"] == "false"
        assert env["DATABASE_URL"].startswith("postgres://")


def test_compose_app_image_installs_the_pinned_requirements():
    dockerfile = compose()["services"]["web"]["build"]["dockerfile_inline"]
    assert "pip install --no-cache-dir -r requirements.txt" in dockerfile
    assert "python:3.11" in dockerfile


def test_gunicorn_and_celery_entry_points_are_installed():
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "gunicorn").exists() or shutil.which("gunicorn")
    assert (bin_dir / "celery").exists() or shutil.which("celery")
