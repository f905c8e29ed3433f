"""The producer's local outbox: sends that failed every attempt wait here, on disk.

A plain sqlite3 file (no Django: producers run in any Python process). A row is
written, and committed, before the producer reports the send as deferred; a
background retrier sends rows oldest first and deletes a row only after Redis
accepted the message. A crash between the two sends the row again on the next run:
a duplicate with the same message id (consumers are idempotent by message id), never
a loss.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from brokers.base import BrokerError
from brokers.rocketmq.message import Message, decode, encode

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    destination TEXT NOT NULL DEFAULT '',
    fields TEXT NOT NULL,
    body BLOB NOT NULL,
    delay_level INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL DEFAULT (julianday('now')),
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT ''
)
"""


@dataclass(frozen=True)
class OutboxRow:
    row_id: int
    message: Message
    delay_level: int
    attempts: int
    last_error: str


class Outbox:
    """A sqlite3 file of messages waiting to be sent. Safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def add(self, message: Message, *, delay_level: int = 0, error: str = "", destination: str = "") -> int:
        """Keep a prepared message; returns its row id once committed to disk.

        `destination` names the Redis database and key prefix it was meant for, so
        producers of different installations may share one file."""
        fields = {name.decode(): value.decode() for name, value in encode(message).items() if name != b"b"}
        with self._lock, self._connect() as db:
            cursor = db.execute(
                "INSERT INTO outbox (message_id, topic, destination, fields, body, delay_level, attempts, "
                "last_error) VALUES (?, ?, ?, ?, ?, ?, 1, ?)",
                (message.message_id, message.topic, destination, json.dumps(fields), bytes(message.body),
                 delay_level, error[:1000]))
            return int(cursor.lastrowid)

    def pending(self, *, destination: str = "", limit: int = 100) -> list[OutboxRow]:
        with self._lock, self._connect() as db:
            rows = db.execute(
                "SELECT id, fields, body, delay_level, attempts, last_error FROM outbox "
                "WHERE destination = ? ORDER BY id LIMIT ?", (destination, limit)).fetchall()
        result = []
        for row_id, fields, body, delay_level, attempts, last_error in rows:
            raw = {name.encode(): value.encode() for name, value in json.loads(fields).items()}
            raw[b"b"] = bytes(body)
            result.append(OutboxRow(row_id, decode(raw), delay_level, attempts, last_error))
        return result

    def count(self, *, destination: str | None = None) -> int:
        with self._lock, self._connect() as db:
            if destination is None:
                return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])
            return int(db.execute("SELECT COUNT(*) FROM outbox WHERE destination = ?",
                                  (destination,)).fetchone()[0])

    def remove(self, row_id: int) -> None:
        with self._lock, self._connect() as db:
            db.execute("DELETE FROM outbox WHERE id = ?", (row_id,))

    def record_failure(self, row_id: int, error: str) -> None:
        with self._lock, self._connect() as db:
            db.execute("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                       (error[:1000], row_id))

    def drain(self, send: Callable[[Message, int], object], *, destination: str = "",
              limit: int = 500) -> int:
        """Send waiting rows oldest first with `send(message, delay_level)`; stop at the
        first failure (order is kept, and Redis is likely still away). Returns how many
        were sent. A permanent error (cannot ever succeed) is logged and kept in the
        file for an operator rather than dropped."""
        sent = 0
        for row in self.pending(destination=destination, limit=limit):
            try:
                send(row.message, row.delay_level)
            except BrokerError as exc:
                self.record_failure(row.row_id, str(exc))
                if exc.permanent:
                    logger.error("outbox message %s cannot be sent: %s", row.message.message_id, exc)
                    continue
                return sent
            # Deleted only after Redis accepted the message: see the module docstring.
            self.remove(row.row_id)
            sent += 1
        return sent


class OutboxRetrier:
    """Background thread draining an outbox every `interval` seconds."""

    def __init__(self, outbox: Outbox, send: Callable[[Message, int], object], *, destination: str = "",
                 interval: float = 1.0) -> None:
        self.outbox = outbox
        self.send = send
        self.destination = destination
        self.interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> OutboxRetrier:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="rocketmq-outbox", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.outbox.drain(self.send, destination=self.destination)
            except Exception:  # never let the retrier die: the rows stay on disk
                logger.exception("outbox retrier failed; will try again")
            self._wake.wait(self.interval)
            self._wake.clear()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
