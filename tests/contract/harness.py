"""What the contract suite needs from each broker's test fixtures.

Each `tests/fixtures/<kind>.py` provides a fixture `<kind>_harness` returning an
object with these methods, driving the *real* broker with its own client library
(or the project's consumer-side helpers) the way an application would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from brokers.base import ClusterConfig


class ContractHarness(Protocol):
    kind: str

    def cluster_config(self) -> ClusterConfig:
        """A config that reaches the running broker with valid credentials."""

    def unreachable_config(self) -> ClusterConfig:
        """A config whose service (and admin) URL points at a closed port."""

    def new_subscription(self) -> str:
        """Create a fresh, uniquely named subscription with its whole retry/DLQ
        topology (as the consumer-side helper would) and return its name."""

    def break_topology(self, subscription: str) -> None:
        """Remove a part of the subscription's retry/DLQ topology that rebuild must
        restore (e.g. the retry queue, or the DLQ's subscription)."""

    def put_dead_letters(self, subscription: str, messages: list[tuple[bytes, Mapping[str, str]]],
                         *, retry_count: int = 3) -> None:
        """Make these messages land in the subscription's DLQ as dead letters, each
        carrying `retry_count` and the given user properties."""

    def put_retry_messages(self, subscription: str, messages: list[tuple[bytes, Mapping[str, str]]]) -> None:
        """Make these messages wait in the subscription's retry queue."""

    def dead_letter_depth(self, subscription: str) -> int:
        """How many messages wait in the DLQ, read from the broker itself."""

    def receive_from_source(self, subscription: str, count: int, *, timeout: float = 10.0
                            ) -> list[tuple[bytes, dict[str, str]]]:
        """Consume up to `count` messages the subscription receives from its source
        (what a replay put back), with their properties/headers as strings."""

    def retry_count_of(self, properties: Mapping[str, str]) -> int:
        """The retry count a consumer would read from a received message's properties."""
