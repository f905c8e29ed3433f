"""The simple consumer: receive, then ack within the invisible duration.

`receive(max, invisible_duration)` hands out messages that then stay invisible to the
group for that many seconds. `ack` within that time settles a message; otherwise it
becomes visible again when the duration ends and is handed out again with its
reconsume count + 1. So the retry interval is the invisible duration minus the time
the consumer spent; past it, the message is retried at once. `change_invisible_duration`
sets a new duration from now, only while the message is not acked and not timed out.
After `max_reconsume_times` retries (default 16) a message that times out again goes
to `%DLQ%{group}`.

State: the group's pending list holds the messages handed out; a sorted set holds when
each becomes visible again and a hash the current receipt token of each. Handing out
and recording the deadline happen in one Lua script, so no message is ever pending
without a deadline (it would never come back). A receipt is valid only for the delivery
it came with: after the message was handed out again, the old receipt no longer acks it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from brokers.base import BrokerError
from brokers.rocketmq.connection import Connection
from brokers.rocketmq.message import Message, MessageError, decode, now_ms, tag_matches, validate_user_topic
from brokers.rocketmq.retry import send_back
from brokers.rocketmq.topology import subscription_ensure

MAX_INVISIBLE_SECONDS = 12 * 3600.0

# Hand out new messages and record their deadlines and receipts atomically.
# KEYS: invisible set, receipts hash, streams...; ARGV: group, consumer, count, deadline ms, token
_RECEIVE_NEW = """
local args = {'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS'}
for i = 3, #KEYS do args[#args + 1] = KEYS[i] end
for i = 3, #KEYS do args[#args + 1] = '>' end
local answer = redis.call('XREADGROUP', unpack(args))
if not answer then return {} end
local out = {}
for _, pair in ipairs(answer) do
  for _, entry in ipairs(pair[2]) do
    local member = pair[1] .. '\\n' .. entry[1]
    redis.call('ZADD', KEYS[1], ARGV[4], member)
    redis.call('HSET', KEYS[2], member, ARGV[5])
    out[#out + 1] = {pair[1], entry[1], entry[2], 1}
  end
end
return out
"""

# Hand out again the messages whose invisible duration ended.
# KEYS: invisible set, receipts hash; ARGV: group, consumer, count, now ms, deadline ms, token
_RECEIVE_EXPIRED = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[4], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, member in ipairs(due) do
  local cut = string.find(member, '\\n', 1, true)
  local stream = string.sub(member, 1, cut - 1)
  local id = string.sub(member, cut + 1)
  local claimed = redis.call('XCLAIM', stream, ARGV[1], ARGV[2], 0, id)
  if #claimed == 0 or not claimed[1][2] then
    redis.call('ZREM', KEYS[1], member)
    redis.call('HDEL', KEYS[2], member)
    if #claimed > 0 then redis.call('XACK', stream, ARGV[1], id) end
  else
    redis.call('ZADD', KEYS[1], ARGV[5], member)
    redis.call('HSET', KEYS[2], member, ARGV[6])
    local pending = redis.call('XPENDING', stream, ARGV[1], id, id, 1)
    local count = 1
    if #pending > 0 then count = pending[1][4] end
    out[#out + 1] = {stream, id, claimed[1][2], count}
  end
end
return out
"""


@dataclass(frozen=True)
class Receipt:
    """Proof of one delivery: needed to ack it or change its invisible duration."""

    stream: str
    entry_id: str
    token: str
    invisible_until_ms: int

    @property
    def member(self) -> str:
        return f"{self.stream}\n{self.entry_id}"


@dataclass(frozen=True)
class Received:
    message: Message
    receipt: Receipt


class ReceiptError(BrokerError):
    """The ack or change came too late or with an outdated receipt (permanent)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


class SimpleConsumer:
    def __init__(self, connection: Connection, group: str, subscriptions: Mapping[str, str], *,
                 max_reconsume_times: int | None = None, consumer_name: str | None = None) -> None:
        for topic in subscriptions:
            validate_user_topic(topic)
        self.connection = connection
        self.group = group
        self.subscriptions = dict(subscriptions)
        self.max_reconsume_times = (connection.max_reconsume_times if max_reconsume_times is None
                                    else max_reconsume_times)
        self.name = consumer_name or f"simple-{uuid.uuid4().hex[:12]}"
        client = connection.client
        self._receive_new = client.register_script(_RECEIVE_NEW)
        self._receive_expired = client.register_script(_RECEIVE_EXPIRED)
        self._started = False

    def start(self) -> SimpleConsumer:
        subscription_ensure(self.connection, group=self.group, topics=self.subscriptions, mode="simple",
                            max_reconsume_times=self.max_reconsume_times)
        self._started = True
        return self

    def receive(self, max_messages: int, invisible_duration: float, *, wait_seconds: float = 0.0
                ) -> list[Received]:
        """Up to `max_messages` messages, invisible to the group for `invisible_duration`
        seconds: first those whose earlier invisible duration ended, then new ones.
        Waits up to `wait_seconds` for at least one."""
        if max_messages < 1:
            raise MessageError("max_messages must be at least 1")
        if not 0 < invisible_duration <= MAX_INVISIBLE_SECONDS:
            raise MessageError(
                f"invisible duration must be more than 0 and at most {MAX_INVISIBLE_SECONDS:g} s")
        if not self._started:
            self.start()
        deadline = time.monotonic() + wait_seconds
        while True:
            received = self._receive_once(max_messages, invisible_duration)
            if received or time.monotonic() >= deadline:
                return received
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def _receive_once(self, max_messages: int, invisible_duration: float) -> list[Received]:
        keys = self.connection.keys
        invisible, receipts = keys.invisible(self.group), keys.receipts(self.group)
        received: list[Received] = []
        now = now_ms()
        until = now + int(invisible_duration * 1000)
        token = uuid.uuid4().hex
        with self.connection.errors():
            rows = self._receive_expired(keys=[invisible, receipts],
                                         args=[self.group, self.name, max_messages, now, until, token])
        received.extend(self._accept(rows, token, until))
        if len(received) < max_messages:
            streams = [keys.stream(topic) for topic in self.subscriptions]
            with self.connection.errors():
                rows = self._receive_new(keys=[invisible, receipts, *streams],
                                         args=[self.group, self.name, max_messages - len(received), until,
                                               token])
            received.extend(self._accept(rows, token, until))
        return received

    def _accept(self, rows: list, token: str, until: int) -> list[Received]:
        accepted = []
        for stream, entry_id, flat, times_delivered in rows:
            stream_key = stream.decode() if isinstance(stream, bytes) else stream
            entry = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            message = decode(fields, entry_id=entry, stream=stream_key, delivery_count=int(times_delivered))
            message = _with_retries(message)
            receipt = Receipt(stream_key, entry, token, until)
            topic = self.connection.keys.topic_of(stream_key)
            if not tag_matches(self.subscriptions.get(topic, "*"), message.tags):
                self._settle(receipt)  # filtered out: the offset moves on
                continue
            if message.reconsume_times > self.max_reconsume_times:
                # The previous delivery was the last allowed one and timed out: dead letter.
                previous = _previous_delivery(message)
                send_back(self.connection, previous, group=self.group,
                          max_reconsume_times=self.max_reconsume_times, requested_level=-1,
                          reason="invisible duration ended without ack")
                self._forget(receipt)
                continue
            accepted.append(Received(message, receipt))
        return accepted

    def ack(self, received: Received | Receipt) -> None:
        """Settle a message. Raises ReceiptError if its invisible duration already ended
        or it was handed out again since (then it will be, or was, consumed again)."""
        receipt = received.receipt if isinstance(received, Received) else received
        self._check(self._receipt_script(receipt, "ack", 0), receipt)

    def change_invisible_duration(self, received: Received | Receipt,
                                  invisible_duration: float) -> Received | Receipt:
        """Make the message invisible for `invisible_duration` seconds from now; only
        before it timed out and before it was acked. Returns the updated receipt holder."""
        if not 0 < invisible_duration <= MAX_INVISIBLE_SECONDS:
            raise MessageError(
                f"invisible duration must be more than 0 and at most {MAX_INVISIBLE_SECONDS:g} s")
        receipt = received.receipt if isinstance(received, Received) else received
        until = now_ms() + int(invisible_duration * 1000)
        self._check(self._receipt_script(receipt, "change", until), receipt)
        updated = Receipt(receipt.stream, receipt.entry_id, receipt.token, until)
        return Received(received.message, updated) if isinstance(received, Received) else updated

    def _receipt_script(self, receipt: Receipt, mode: str, until: int) -> int:
        keys = self.connection.keys
        with self.connection.errors():
            return int(self.connection.receipt(
                keys=[keys.invisible(self.group), keys.receipts(self.group), receipt.stream],
                args=[receipt.member, receipt.token, now_ms(), self.group, receipt.entry_id, mode, until]))

    @staticmethod
    def _check(answer: int, receipt: Receipt) -> None:
        if answer == -1:
            raise ReceiptError(f"message entry {receipt.entry_id} was acked or handed out again: "
                               "this receipt is no longer valid")
        if answer == -2:
            raise ReceiptError(f"the invisible duration of entry {receipt.entry_id} has ended: "
                               "the message will be delivered again")

    def _settle(self, receipt: Receipt) -> None:
        keys = self.connection.keys
        with self.connection.errors():
            pipe = self.connection.client.pipeline(transaction=True)
            pipe.xack(receipt.stream, self.group, receipt.entry_id)
            pipe.zrem(keys.invisible(self.group), receipt.member)
            pipe.hdel(keys.receipts(self.group), receipt.member)
            pipe.execute()

    def _forget(self, receipt: Receipt) -> None:
        keys = self.connection.keys
        with self.connection.errors():
            pipe = self.connection.client.pipeline(transaction=True)
            pipe.zrem(keys.invisible(self.group), receipt.member)
            pipe.hdel(keys.receipts(self.group), receipt.member)
            pipe.execute()


def _with_retries(message: Message) -> Message:
    extra = max(0, message.delivery_count - 1)
    return replace(message, reconsume_times=message.reconsume_times + extra) if extra else message


def _previous_delivery(message: Message) -> Message:
    return replace(message, reconsume_times=message.reconsume_times - 1)
