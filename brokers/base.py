"""The contract every broker adapter follows.

The console talks to Pulsar, the RocketMQ-style broker and RabbitMQ only through a
`BrokerAdapter`. Everything that crosses the boundary is a frozen dataclass defined
here; every failure is a `BrokerError`. The same contract tests
(`tests/contract/`) run over every adapter against the real brokers.

Words as in ../shared/spec/semantics.md: a *subscription* is one consumer group on a
*source*; it has a *retry queue* and a *dead-letter queue* (DLQ).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any


class BrokerError(Exception):
    """The one error an adapter raises.

    `permanent=True` means trying again cannot help (bad credentials, a destination
    that does not exist, a message too large); `False` means the broker may answer
    later (unreachable, timed out, flow control).
    """

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent

    def __str__(self) -> str:
        return self.message


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach one cluster. Secrets are plain here and nowhere else shown.

    `options` holds kind-specific settings (Pulsar naming version, RabbitMQ vhost and
    exchange names, Redis database...). `known_subscriptions` are the subscriptions
    the console was told about, for brokers without an inventory API.
    """

    kind: str
    name: str
    service_url: str
    admin_url: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    options: Mapping[str, Any] = field(default_factory=dict)
    known_subscriptions: tuple[KnownSubscription, ...] = ()
    timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _frozen(self.options))
        object.__setattr__(self, "known_subscriptions", tuple(self.known_subscriptions))


@dataclass(frozen=True)
class KnownSubscription:
    """A subscription registered in the console (name, source and mode)."""

    name: str
    source: str
    mode: str = ""


@dataclass(frozen=True)
class SubscriptionInfo:
    """One consumer group on a source, with its retry/DLQ topology and its health.

    `problems` lists what is missing or wrong in words an operator understands
    ("DLQ has no subscription"); empty means healthy. Depths are None where the
    broker cannot tell.
    """

    name: str
    source: str
    mode: str
    retry_queue: str
    dead_letter_queue: str
    backlog: int | None = None
    retry_depth: int | None = None
    dead_letter_depth: int | None = None
    consumers: int | None = None
    problems: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "problems", tuple(self.problems))
        object.__setattr__(self, "details", _frozen(self.details))

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class RebuildStep:
    """One thing a rebuild creates: `action` (e.g. "create topic"), `target`, `detail`."""

    action: str
    target: str
    detail: str = ""


@dataclass(frozen=True)
class RebuildPlan:
    """What a rebuild of one subscription would create. Empty steps: nothing to do."""

    subscription: str
    steps: tuple[RebuildStep, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))


@dataclass(frozen=True)
class DeadLetter:
    """A dead letter as read from a DLQ.

    `broker_message_id` is stable for the message on its cluster: collecting it twice
    gives the same id, which is what keeps the archive free of duplicates.
    """

    broker_message_id: str
    subscription: str
    source: str
    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    retry_count: int = 0
    origin_message_id: str = ""
    first_failure_at: datetime | None = None
    last_failure_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", _frozen(self.properties))


@dataclass(frozen=True)
class PeekedMessage:
    """A message seen in a retry queue without being consumed. `due_at` where known."""

    message_id: str
    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    retry_count: int = 0
    due_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", _frozen(self.properties))


@dataclass(frozen=True)
class ReplayMessage:
    """An archived dead letter to put back.

    `key` identifies it to the caller (the archive row id); `destination` is None for
    the adapter's default (where the message came from) or one of the adapter's
    `replay_destinations()`.
    """

    key: str
    subscription: str
    source: str
    payload: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    origin_message_id: str = ""
    destination: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", _frozen(self.properties))


@dataclass(frozen=True)
class ReplayOutcome:
    """What the broker said of one republished message.

    `confirmed` is True only once the broker confirmed the copy; otherwise `error`
    says why, and `permanent` whether trying again can help.
    """

    key: str
    confirmed: bool
    broker_message_id: str = ""
    error: str = ""
    permanent: bool = False


# A sink takes a batch of dead letters and returns only once they are committed to
# the archive. An adapter acknowledges a batch on the broker after its sink returned,
# never before: a crash in between leaves the messages on the broker (and collecting
# again is harmless, the archive is keyed by broker_message_id).
DeadLetterSink = Callable[[Sequence[DeadLetter]], None]


class BrokerAdapter(abc.ABC):
    """One cluster, seen through the operations the console needs.

    Adapters are cheap to build and hold connections only while a call runs or until
    `close()`. Every method raises `BrokerError` and nothing else.
    """

    kind: str = ""
    # What peeking does on this broker, in words for the operator (the peek page shows it).
    peek_note: str = (
        "Peeking reads the retry queue without consuming it: nothing is acknowledged or moved."
    )

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing
        """Release connections. Safe to call twice."""

    def __enter__(self) -> BrokerAdapter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abc.abstractmethod
    def check_connection(self) -> str:
        """Reach the cluster with the configured credentials; return a one-line
        description ("RabbitMQ 3.12.1, vhost /"). Raise BrokerError if it cannot."""

    @abc.abstractmethod
    def list_subscriptions(self) -> list[SubscriptionInfo]:
        """Every subscription of the cluster with its retry queue, DLQ, depths and
        topology problems, sorted by name."""

    @abc.abstractmethod
    def plan_rebuild(self, subscription: str) -> RebuildPlan:
        """What must be created so the subscription's retry/DLQ topology is whole.
        Changes nothing."""

    @abc.abstractmethod
    def apply_rebuild(self, plan: RebuildPlan) -> RebuildPlan:
        """Create what the plan lists; return the steps actually carried out.
        Idempotent: applying a plan twice creates nothing the second time, and a
        rebuild never deletes a queue or topic holding messages."""

    @abc.abstractmethod
    def collect_dead_letters(
        self, subscription: str, sink: DeadLetterSink, *, limit: int | None = None,
        batch_size: int = 500,
    ) -> int:
        """Move dead letters from the subscription's DLQ into the archive.

        Reads up to `limit` messages (None: what is there now) in batches, hands each
        batch to `sink`, and acknowledges/removes the batch on the broker only after
        `sink` returned. If `sink` raises, nothing of that batch is acknowledged and the
        error propagates. Returns how many messages were handed to the sink."""

    @abc.abstractmethod
    def peek_retry_queue(self, subscription: str, *, limit: int = 50) -> list[PeekedMessage]:
        """Messages waiting in the retry queue, oldest first, without consuming them."""

    @abc.abstractmethod
    def republish(self, messages: Sequence[ReplayMessage]) -> list[ReplayOutcome]:
        """Put archived dead letters back, waiting for the broker's confirm of each.

        One outcome per message, in order. The copy keeps the payload and the user's
        properties, resets the retry count and carries a replay marker (the origin
        message id) so it can be traced. Never raises for a single bad message: its
        outcome says why; raises BrokerError only when the broker cannot be reached."""

    @abc.abstractmethod
    def discard_dead_letters(self, subscription: str) -> int:
        """Drop the dead letters still waiting in the subscription's DLQ without
        archiving them; return how many. (Archived letters are discarded in the
        archive, not here.)"""

    def replay_destinations(self, subscription: str) -> list[tuple[str, str]]:
        """(value, label) pairs an operator may pick as a replay destination; the
        first is the default."""
        return [("", "where it came from")]
