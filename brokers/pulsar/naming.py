"""Pulsar topic names: validation and the retry/DLQ naming of each cluster version.

Section 1 of the semantics: the names of a subscription's retry letter topic and dead
letter topic depend on the Pulsar version the consumers run against, and a user may
override both. Everything here is pure string work, shared by the consumer-side
helper (`brokers.pulsar.retry`) and the console adapter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The subscription the console (and the helper, as `initial_subscription_name`) keeps on
# every DLQ: a DLQ with no subscription may lose its messages to retention.
CONSOLE_SUBSCRIPTION = "redrive"

NAMING_VERSIONS = ("2.9", "2.7", "2.6")
DEFAULT_NAMING_VERSION = "2.9"

# Suffixes of retry/DLQ topics, every version; used to tell them from source topics.
RETRY_DLQ_SUFFIXES = ("-RETRY", "-DLQ", "-retry", "-dlq")

# Tenant, namespace and local name: letters, digits and - _ = : . (Pulsar's own rule for
# names), no slash inside a part. Partition suffixes (-partition-N) are valid local names.
_PART = r"[A-Za-z0-9_\-=:.]+"
_FULL_TOPIC = re.compile(rf"^(persistent|non-persistent)://({_PART})/({_PART})/({_PART})$")
_SHORT_TOPIC = re.compile(rf"^{_PART}$")
_SUBSCRIPTION = re.compile(r"^[^\x00-\x1f/\\]{1,255}$")


class InvalidName(ValueError):
    """A topic or subscription name Pulsar would refuse."""


@dataclass(frozen=True)
class TopicName:
    """A full topic name split into its parts."""

    domain: str
    tenant: str
    namespace: str
    local: str

    @property
    def full(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def namespace_path(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def sibling(self, local: str) -> TopicName:
        """A topic in the same domain, tenant and namespace."""
        return TopicName(self.domain, self.tenant, self.namespace, local)


def topic_parse(topic: str) -> TopicName:
    """Parse a topic name the way the Pulsar client does.

    A short name (`orders`) means `persistent://public/default/orders`. Anything else
    that is not `domain://tenant/namespace/name` with Pulsar's allowed characters
    raises InvalidName with a message naming the problem.
    """
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidName("a topic name is required")
    topic = topic.strip()
    match = _FULL_TOPIC.match(topic)
    if match:
        return TopicName(*match.groups())
    if _SHORT_TOPIC.match(topic):
        return TopicName("persistent", "public", "default", topic)
    raise InvalidName(
        f"{topic!r} is not a valid Pulsar topic name: expected persistent://tenant/namespace/name "
        "with letters, digits and - _ = : . only"
    )


def subscription_check(subscription: str) -> str:
    if not isinstance(subscription, str) or not _SUBSCRIPTION.match(subscription.strip() or "\x00"):
        raise InvalidName(f"{subscription!r} is not a valid Pulsar subscription name")
    return subscription.strip()


def is_retry_or_dead_letter_topic(topic: str) -> bool:
    return topic.endswith(RETRY_DLQ_SUFFIXES)


@dataclass(frozen=True)
class RetryTopology:
    """Where one subscription's retries and dead letters go."""

    source: str
    subscription: str
    retry_topic: str
    dead_letter_topic: str
    naming_version: str


def retry_topology(
    source: str, subscription: str, *, naming_version: str = DEFAULT_NAMING_VERSION,
    retry_topic: str | None = None, dead_letter_topic: str | None = None,
) -> RetryTopology:
    """The retry letter topic and DLQ of a subscription, per the cluster's version.

    | version | retry letter topic | dead letter topic |
    | 2.9+    | {topic}-{sub}-RETRY | {topic}-{sub}-DLQ |
    | 2.7     | {sub}-RETRY         | {sub}-DLQ         |
    | 2.6     | {sub}-retry         | {sub}-dlq         |

    Generated names live in the source's tenant and namespace. An override (the
    `deadLetterPolicy.retryLetterTopic` / `deadLetterTopic` of the Java client) wins;
    a short override is put in the source's namespace too.
    """
    topic = topic_parse(source)
    subscription = subscription_check(subscription)
    version = naming_version_check(naming_version)
    if version == "2.9":
        retry_local, dlq_local = f"{topic.local}-{subscription}-RETRY", f"{topic.local}-{subscription}-DLQ"
    elif version == "2.7":
        retry_local, dlq_local = f"{subscription}-RETRY", f"{subscription}-DLQ"
    else:
        retry_local, dlq_local = f"{subscription}-retry", f"{subscription}-dlq"
    retry = _override(topic, retry_topic) or topic.sibling(retry_local).full
    dlq = _override(topic, dead_letter_topic) or topic.sibling(dlq_local).full
    # The generated local names must themselves be valid (a subscription may hold
    # characters a topic name may not, e.g. a space).
    topic_parse(retry)
    topic_parse(dlq)
    if retry == dlq:
        raise InvalidName("the retry topic and the dead letter topic must differ")
    return RetryTopology(topic.full, subscription, retry, dlq, version)


def _override(source: TopicName, override: str | None) -> str | None:
    if not override:
        return None
    if "://" in override:
        return topic_parse(override).full
    return source.sibling(topic_parse(override).local).full


def naming_version_check(version: Any) -> str:
    """Accept "2.9", "2.10", "3.3", "4.0" (all named like 2.9), "2.7", "2.6"."""
    text = str(version or DEFAULT_NAMING_VERSION).strip()
    try:
        major, minor = (int(x) for x in text.split(".")[:2])
    except ValueError:
        raise InvalidName(f"naming_version {text!r} is not a Pulsar version like 2.9, 2.7 or 2.6") from None
    if (major, minor) >= (2, 9):
        return "2.9"
    if (major, minor) == (2, 7):
        return "2.7"
    if (major, minor) == (2, 6):
        return "2.6"
    # 2.8 and older than 2.6 are not in the naming table; guessing would point the
    # console at topics nobody writes to.
    raise InvalidName(f"naming_version {text!r} is not one of 2.9 (and later), 2.7, 2.6; "
                      "use overrides to name the topics yourself")


def topology_from_options(source: str, subscription: str, options: Mapping[str, Any]) -> RetryTopology:
    """The topology of a subscription under a cluster's options (see docs/pulsar.md)."""
    overrides = (options.get("overrides") or {}).get(subscription) or {}
    return retry_topology(
        source, subscription,
        naming_version=options.get("naming_version") or DEFAULT_NAMING_VERSION,
        retry_topic=overrides.get("retry_topic"),
        dead_letter_topic=overrides.get("dead_letter_topic"),
    )
