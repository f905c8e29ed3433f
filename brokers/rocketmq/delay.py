"""Delayed messages: the delay set and the scheduler that moves due messages out of it.

A delayed message is a hash holding its entry fields, its id in `{prefix}delay` scored
by the time it is due (ms), and the same in a per-topic index for peeking. The
scheduler moves due messages to their topic streams with one Lua script per batch:
Redis runs it atomically, so every message is at all times either in the delay set
or in its stream. All state is in Redis, so a scheduler that is killed and started
again (or several schedulers at once) deliver every message exactly once.
"""

from __future__ import annotations

import logging
import threading

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import Message, encode, now_ms

logger = logging.getLogger(__name__)

# The scheduler looks at the delay set at least this often (seconds), so a message is
# moved well within 1 s of its due time.
POLL_SECONDS = 0.2
BATCH = 500


def delayed_args(connection: Connection, message: Message, due_ms: int, *, ack_stream: str = "",
                 group: str = "", entry_id: str = "") -> tuple[list[str], list]:
    """KEYS and ARGV of the store-delayed script for `message` due at `due_ms`."""
    keys = connection.keys
    fields: list = []
    for name, value in encode(message).items():
        fields.extend((name, value))
    return (
        [keys.delay, keys.delay_index(message.topic), keys.delayed_message(message.message_id), ack_stream],
        [due_ms, message.message_id, message.topic, group, entry_id, *fields],
    )


def delay_store(connection: Connection, message: Message, due_ms: int) -> None:
    """Keep a prepared message in the delay set until `due_ms`."""
    script_keys, args = delayed_args(connection, message, due_ms)
    with connection.errors():
        connection.store_delayed(keys=script_keys, args=args)


def move_due(connection: Connection, *, now: int | None = None, batch: int = BATCH) -> int:
    """Move every message due by `now` (ms) to its stream; return how many moved."""
    moved = 0
    keys = connection.keys
    while True:
        with connection.errors():
            count = int(connection.move_due(
                keys=[keys.delay],
                args=[now if now is not None else now_ms(), batch, keys.delayed_message_prefix,
                      keys.stream(""), keys.delay_index("")]))
        moved += count
        if count < batch:
            return moved


def next_due_ms(connection: Connection) -> int | None:
    with connection.errors():
        first = connection.client.zrange(connection.keys.delay, 0, 0, withscores=True)
    return int(first[0][1]) if first else None


class DelayScheduler:
    """Moves due delayed messages to their streams until stopped.

    Run it in a thread (`start()`/`stop()`) or in the foreground (`run(stop_event)`).
    Redis being unreachable is logged and retried: the messages wait in Redis.
    """

    def __init__(self, connection: Connection, *, poll_seconds: float = POLL_SECONDS,
                 name: str = "rocketmq-delay") -> None:
        self.connection = connection
        self.poll_seconds = poll_seconds
        self.name = name
        self.moved = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        count = move_due(self.connection)
        self.moved += count
        return count

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or self._stop
        failing = False
        while not stop.is_set():
            try:
                self.run_once()
                upcoming = next_due_ms(self.connection)
                if failing:
                    logger.info("%s: Redis at %s reachable again", self.name, self.connection.where)
                failing = False
            except BrokerError as exc:
                if not failing:
                    logger.warning("%s: %s; retrying", self.name, exc)
                failing = True
                stop.wait(1.0)
                continue
            wait = self.poll_seconds
            if upcoming is not None:
                wait = min(wait, max(0.0, (upcoming - now_ms()) / 1000))
            stop.wait(wait)

    def start(self) -> DelayScheduler:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

