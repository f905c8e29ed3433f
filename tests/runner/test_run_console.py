"""`make run`'s command end to end: the console, the embedded pulsar-lite and the demo.

Runs `manage.py run_console` as a child process on a temporary SQLite database and
var directory (without Celery, which has its own tests), the way a newcomer does.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from brokers.pulsar.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO_SUBSCRIPTION = "demo-billing"


def processes_using(path: Path) -> list[int]:
    """Pids of processes whose command line mentions `path` (the broker's data dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmdline and "pulsar-lite" in cmdline:
            found.append(int(entry.name))
    return found


def archived_demo_letters(database: Path) -> int:
    try:
        with sqlite3.connect(database, timeout=5) as db:
            return db.execute("SELECT count(*) FROM archive_deadletter WHERE subscription = ?",
                              (DEMO_SUBSCRIPTION,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.fixture
def console_env(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'redrive.sqlite3'}",
           "REDRIVE_VAR_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("TEST_DATABASE_NAME", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                   check=True, timeout=300)
    return env


def test_run_console_serves_the_login_and_the_demo_fills_the_archive(console_env, tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_console", "--port", str(port), "--no-celery"],
        cwd=ROOT, env=console_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not re.search(r"Log in as admin / \S+", "".join(output)):
            assert process.poll() is None, "".join(output)
            time.sleep(0.5)
        text = "".join(output)
        assert f"Redrive console: http://127.0.0.1:{port}/" in text, text
        password = re.search(r"Log in as admin / (\S+)", text).group(1)
        assert password == (tmp_path / "admin-password").read_text().strip()

        page = None
        while time.monotonic() < deadline and page is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=5) as response:
                    page = (response.status, response.read().decode())
            except OSError:
                time.sleep(0.5)
        assert page is not None and page[0] == 200
        assert "password" in page[1].lower()

        # The demo fails a share of its orders and the runner collects its DLQ every ~10 s.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and archived_demo_letters(tmp_path / "redrive.sqlite3") == 0:
            assert process.poll() is None, "".join(output)
            time.sleep(1)
        assert archived_demo_letters(tmp_path / "redrive.sqlite3") > 0, "".join(output)
        with sqlite3.connect(tmp_path / "redrive.sqlite3") as db:
            url, options = db.execute("SELECT service_url, options FROM clusters_cluster WHERE name = ?",
                                      ("embedded-pulsar",)).fetchone()
            registered = db.execute("SELECT count(*) FROM clusters_registeredsubscription WHERE name = ?",
                                    (DEMO_SUBSCRIPTION,)).fetchone()[0]
        assert url.startswith("pulsar://127.0.0.1:") and "127.0.0.1" in options
        assert registered == 1
        assert processes_using(tmp_path / "pulsar-lite")  # the embedded broker runs
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    # Stopped cleanly: no pulsar-lite of this run is left behind.
    deadline = time.monotonic() + 15
    while processes_using(tmp_path / "pulsar-lite") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_using(tmp_path / "pulsar-lite") == []
