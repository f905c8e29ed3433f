"""The connection to the Redis database of one RocketMQ-style installation.

`Connection` bundles the redis-py client, the key layout, the delay level table and
the Lua scripts that make each move atomic. Every Redis failure is turned into a
`BrokerError` by `broker_errors()`; flow control (Redis out of memory, busy, loading)
becomes `FlowControlError`, which the producer answers with back-off rather than an
immediate retry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from brokers.base import BrokerError, ClusterConfig
from brokers.rocketmq.naming import DEFAULT_PREFIX, Keys
from brokers.rocketmq.schedule import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_MAX_RECONSUME_TIMES,
    parse_delay_levels,
)

DEFAULT_URL = "redis://127.0.0.1:6379/5"
# Redis error prefixes that mean "the server protects itself, try again later".
FLOW_CONTROL_PREFIXES = ("OOM ", "BUSY ", "LOADING ", "MASTERDOWN ", "TRYAGAIN ")
FLOW_CONTROL_ERRORS = (redis.exceptions.OutOfMemoryError, redis.exceptions.BusyLoadingError,
                       redis.exceptions.MasterDownError, redis.exceptions.TryAgainError)


class FlowControlError(BrokerError):
    """The server refused for lack of capacity: back off before trying again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=False)


def describe_url(url: str) -> str:
    """host:port/db of a Redis URL, without credentials (safe to log and show)."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/") or "0"
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}/{database}"


def translate(exc: Exception, where: str) -> BrokerError:
    if isinstance(exc, BrokerError):
        return exc
    if isinstance(exc, redis.AuthenticationError | redis.exceptions.NoPermissionError):
        return BrokerError(f"Redis at {where} refused the credentials: {exc}", permanent=True)
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return BrokerError(f"Redis at {where} is unreachable: {exc}")
    if isinstance(exc, redis.ResponseError):
        text = str(exc)
        # redis-py turns known prefixes into classes (and rewrites the text of errors
        # inside a pipeline), so check both.
        if isinstance(exc, FLOW_CONTROL_ERRORS) or text.startswith(FLOW_CONTROL_PREFIXES):
            return FlowControlError(f"Redis at {where} is under flow control: {text}")
        return BrokerError(f"Redis at {where} refused the command: {text}", permanent=True)
    if isinstance(exc, redis.RedisError):
        return BrokerError(f"Redis at {where} failed: {exc}")
    raise exc


# Store a delayed copy (retry topic or a producer's delayed message) and, in the same
# script, acknowledge the original entry. Writes come before the ack, so an error part
# way leaves the original pending (it will be delivered again), never lost.
# KEYS: delay set, delay index, delayed hash, source stream ("" if none)
# ARGV: due ms, message id, target topic, group, entry id, then field/value pairs
_STORE_DELAYED = """
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = '_topic'
fields[#fields + 1] = ARGV[3]
redis.call('HSET', KEYS[3], unpack(fields))
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
if ARGV[5] ~= '' then redis.call('XACK', KEYS[4], ARGV[4], ARGV[5]) end
return 1
"""

# Append a copy to a stream (DLQ, or the retry stream at once) and acknowledge the
# original, in that order, atomically.
# KEYS: target stream, source stream ("" if none); ARGV: group, entry id, field/value pairs
_STORE_NOW = """
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
if ARGV[2] ~= '' then redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]) end
return id
"""

# Move due delayed messages to their topic streams: XADD, then forget the delay entry.
# The whole script runs atomically, so a crash leaves each message either still in the
# delay set or already in its stream, never both and never neither.
# KEYS: delay set; ARGV: now ms, limit, delayed hash prefix, stream prefix, index prefix
_MOVE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  local hash = ARGV[3] .. id
  local flat = redis.call('HGETALL', hash)
  local topic = nil
  local fields = {}
  for i = 1, #flat, 2 do
    if flat[i] == '_topic' then topic = flat[i + 1]
    else fields[#fields + 1] = flat[i]; fields[#fields + 1] = flat[i + 1] end
  end
  if topic ~= nil and #fields > 0 then
    redis.call('XADD', ARGV[4] .. topic, '*', unpack(fields))
    redis.call('ZREM', ARGV[5] .. topic, id)
  end
  redis.call('DEL', hash)
  redis.call('ZREM', KEYS[1], id)
end
return #due
"""

# Simple consumer ack / change of invisible duration: only with the current receipt,
# only before the deadline. ARGV: member, token, now ms, group, entry id, mode, new deadline
# KEYS: invisible set, receipts hash, stream
_RECEIPT = """
local token = redis.call('HGET', KEYS[2], ARGV[1])
if not token or token ~= ARGV[2] then return -1 end
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not deadline or tonumber(deadline) <= tonumber(ARGV[3]) then return -2 end
if ARGV[6] == 'ack' then
  redis.call('XACK', KEYS[3], ARGV[4], ARGV[5])
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
redis.call('ZADD', KEYS[1], ARGV[7], ARGV[1])
return 2
"""


@dataclass
class Connection:
    """One Redis database seen as a RocketMQ-style broker."""

    client: redis.Redis
    keys: Keys = field(default_factory=Keys)
    delay_levels: tuple[float, ...] = field(default_factory=lambda: parse_delay_levels(DEFAULT_DELAY_LEVELS))
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    where: str = "redis"

    def __post_init__(self) -> None:
        self.store_delayed = self.client.register_script(_STORE_DELAYED)
        self.store_now = self.client.register_script(_STORE_NOW)
        self.move_due = self.client.register_script(_MOVE_DUE)
        self.receipt = self.client.register_script(_RECEIPT)

    @classmethod
    def from_url(cls, url: str = DEFAULT_URL, *, prefix: str = DEFAULT_PREFIX,
                 delay_levels: str | Sequence[float] = DEFAULT_DELAY_LEVELS,
                 max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES, timeout: float = 5.0,
                 password: str = "", username: str = "") -> Connection:
        """Connect lazily (nothing is sent until the first command).

        redis-py's own retries are switched off: the producer decides when to try
        again, and an unreachable server must show up at once, not after hidden waits.
        """
        extra: dict[str, Any] = {}
        if password:
            extra["password"] = password
        if username:
            extra["username"] = username
        try:
            client = redis.Redis.from_url(
                url or DEFAULT_URL, socket_timeout=timeout, socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0), retry_on_timeout=False, **extra)
        except ValueError as exc:
            raise BrokerError(f"the Redis URL is not valid: {exc}", permanent=True) from exc
        return cls(client=client, keys=Keys(prefix), delay_levels=parse_delay_levels(delay_levels),
                   max_reconsume_times=max_reconsume_times, where=describe_url(url or DEFAULT_URL))

    @classmethod
    def from_config(cls, config: ClusterConfig, *, timeout: float | None = None) -> Connection:
        """From a cluster's config; `options` may set key_prefix, delay_levels and
        max_reconsume_times (the default of groups that did not register their own)."""
        options: Mapping[str, Any] = config.options
        try:
            levels = parse_delay_levels(options.get("delay_levels") or DEFAULT_DELAY_LEVELS)
        except ValueError as exc:
            raise BrokerError(f"option delay_levels: {exc}", permanent=True) from exc
        return cls.from_url(
            config.service_url or DEFAULT_URL, prefix=str(options.get("key_prefix") or DEFAULT_PREFIX),
            delay_levels=levels,
            max_reconsume_times=int(options.get("max_reconsume_times") or DEFAULT_MAX_RECONSUME_TIMES),
            timeout=timeout if timeout is not None else config.timeout_seconds,
            password=config.password, username=config.username)

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Turn redis-py errors into BrokerError (FlowControlError for flow control)."""
        try:
            yield
        except (redis.RedisError, OSError) as exc:
            raise translate(exc, self.where) from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
