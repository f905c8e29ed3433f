"""The console a benchmark measures: Django set up on a PostgreSQL database of its own.

Each benchmark names its database (`<DATABASE_URL's name>_bench_<suffix>`), so a run
never touches the console's or the tests' data; it is created and migrated on first use.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"


def bench_database_url(url: str, suffix: str) -> str:
    parts = urlsplit(url)
    name = (parts.path.lstrip("/") or "postgres") + f"_bench_{suffix}"
    return urlunsplit(parts._replace(path="/" + name))


def ensure_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        if not connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            connection.execute(f'CREATE DATABASE "{name}"')


def console_on_bench_database(suffix: str, **environment: str) -> str:
    """Point Django at the benchmark's database (plus any other settings given as
    environment variables), set it up and migrate; return the database URL."""
    database_url = bench_database_url(os.environ.get("DATABASE_URL", DEFAULT_SERVER), suffix)
    ensure_database(database_url)
    os.environ["DATABASE_URL"] = database_url
    os.environ.update(environment)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return database_url
