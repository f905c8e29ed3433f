"""What the console reads about a Pulsar cluster besides the binary protocol.

`PulsarAdmin` is a small client of the admin REST API (`/admin/v2`) of Pulsar 2.x-4.x:
tenants, namespaces, topics, topic stats, creating topics and subscriptions. It uses
only the standard library and raises BrokerError with plain words for what an operator
sees: an admin URL that answers HTML (a proxy, a login page, the wrong port), 401/403,
a timeout.

`BrokerMetrics` reads the Prometheus endpoint a broker exposes (`/metrics`; pulsar-lite
has it, a real broker serves it on its web port). For a cluster without an admin URL
it is the only way to see which topics and subscriptions exist: its figures are a
snapshot the broker refreshes every few seconds.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from brokers.base import BrokerError

_MAX_BODY = 20 * 1024 * 1024


class PulsarAdmin:
    """The admin REST API of one cluster. `base_url` like http://broker:8080."""

    def __init__(self, base_url: str, *, token: str = "", username: str = "", password: str = "",
                 timeout: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BrokerError(f"the admin URL must be an http(s) URL with a host, not scheme "
                              f"{parts.scheme or 'none'!r}", permanent=True)
        self.base_url = base_url.strip().rstrip("/")
        # Errors name the URL: never with credentials written into it.
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        self.display_url = urllib.parse.urlunsplit(parts._replace(
            netloc=host + (f":{parts.port}" if parts.port else ""))).rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": "application/json"}
        if parts.username and not (token or username):
            username, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(
                parts.password or "")
            self.base_url = self.display_url
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        elif username:
            basic = base64.b64encode(f"{username}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {basic}"

    # --- reads -------------------------------------------------------------------
    def version(self) -> str:
        return str(self._call("GET", "/admin/v2/brokers/version", expect_json=False)).strip().strip('"')

    def tenants(self) -> list[str]:
        return self._list(self._call("GET", "/admin/v2/tenants"))

    def namespaces(self, tenant: str) -> list[str]:
        return self._list(self._call("GET", f"/admin/v2/namespaces/{_quote(tenant)}"))

    def topics(self, namespace: str) -> list[str]:
        """Persistent topics of a namespace ("tenant/ns"), partitions listed one by one."""
        return self._list(self._call("GET", f"/admin/v2/persistent/{_quote_path(namespace)}"))

    def topic_stats(self, topic: str) -> dict[str, Any] | None:
        """The stats of a topic; None if it does not exist."""
        stats = self._call("GET", f"{_topic_path(topic)}/stats", missing_ok=True)
        if stats is None:
            return None
        if not isinstance(stats, dict):
            raise BrokerError("the admin API answered topic stats in an unexpected shape")
        return stats

    # --- writes ------------------------------------------------------------------
    def topic_create(self, topic: str) -> bool:
        """Create a non-partitioned topic; False if it existed already."""
        return self._call("PUT", _topic_path(topic), conflict_ok=True, expect_json=False) is not None

    def subscription_create(self, topic: str, subscription: str) -> bool:
        """Create a subscription at the earliest message; False if it existed already."""
        earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
        return self._call(
            "PUT", f"{_topic_path(topic)}/subscription/{_quote(subscription)}",
            body=earliest, conflict_ok=True, expect_json=False,
        ) is not None

    # --- transport ---------------------------------------------------------------
    def _list(self, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise BrokerError("the admin API answered a list in an unexpected shape")
        return value

    def _call(self, method: str, path: str, *, body: Any = None, missing_ok: bool = False,
              conflict_ok: bool = False, expect_json: bool = True) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        # The scheme was checked in __init__ (http or https only).
        request = urllib.request.Request(  # noqa: S310
            self.base_url + path, data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                raw = response.read(_MAX_BODY)
                content_type = response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise BrokerError(
                    f"the admin API refused the credentials (HTTP {exc.code})", permanent=True
                ) from None
            if exc.code == 404 and missing_ok:
                return None
            if exc.code in (404, 409) and conflict_ok:
                return None if exc.code == 409 else _raise_missing(path)
            reason = _error_reason(exc)
            raise BrokerError(f"the admin API answered HTTP {exc.code} to {method} {path}: {reason}",
                              permanent=400 <= exc.code < 500 and exc.code != 429) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BrokerError(f"cannot reach the admin API at {self.display_url}: {reason}") from None
        if "html" in content_type.lower() or raw.lstrip()[:1] == b"<":
            raise BrokerError(
                f"{self.display_url} answered an HTML page, not the Pulsar admin API: check the admin URL",
                permanent=True,
            )
        if not expect_json:
            return raw.decode("utf-8", "replace") if raw else ""
        try:
            return json.loads(raw)
        except ValueError:
            raise BrokerError(f"{self.display_url} did not answer JSON: check the admin URL",
                              permanent=True) from None


def _raise_missing(path: str) -> None:
    raise BrokerError(f"the admin API does not know {path} (tenant or namespace missing?)",
                      permanent=True)


def _error_reason(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read(4096)
        reason = json.loads(body).get("reason")
        if isinstance(reason, str):
            return reason[:300]
    except (ValueError, AttributeError, OSError):
        pass
    return str(exc.reason)[:300]


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _quote_path(namespace: str) -> str:
    return "/".join(_quote(p) for p in namespace.split("/"))


def _topic_path(topic: str) -> str:
    from brokers.pulsar.naming import topic_parse

    name = topic_parse(topic)
    return (f"/admin/v2/{name.domain}/{_quote(name.tenant)}/{_quote(name.namespace)}/"
            f"{_quote(name.local)}")


# --- metrics --------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class MetricsSnapshot:
    """Topics and subscriptions a broker reported, with subscription backlogs."""

    topics: set[str] = field(default_factory=set)
    subscription_counts: dict[str, int] = field(default_factory=dict)
    backlogs: dict[tuple[str, str], int] = field(default_factory=dict)

    def subscriptions_of(self, topic: str) -> list[str]:
        return sorted(sub for (t, sub) in self.backlogs if t == topic)


class BrokerMetrics:
    """The Prometheus endpoint of a broker, read for inventory."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise BrokerError(f"metrics URL {url!r} is not an http(s) URL", permanent=True)
        self.url = url
        self.timeout = timeout

    def snapshot(self) -> MetricsSnapshot:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:  # noqa: S310
                text = response.read(_MAX_BODY).decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise BrokerError(f"cannot read broker metrics at {self.url}: "
                              f"{getattr(exc, 'reason', exc)}") from None
        return metrics_parse(text)


def metrics_parse(text: str) -> MetricsSnapshot:
    """Read the topic and subscription samples out of Prometheus text.

    pulsar-lite labels a topic by its local name plus a `namespace` label; a Pulsar
    broker puts the full name in `topic`. Both become full persistent names.
    """
    snapshot = MetricsSnapshot()
    for line in text.splitlines():
        if not line.startswith("pulsar_"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, label_text, value = match.groups()
        labels = dict(_LABEL.findall(label_text))
        topic = labels.get("topic")
        if not topic:
            continue
        if "://" not in topic:
            namespace = labels.get("namespace", "public/default")
            topic = f"persistent://{namespace}/{topic}"
        snapshot.topics.add(topic)
        try:
            number = int(float(value))
        except ValueError:
            continue
        if name == "pulsar_subscriptions_count":
            snapshot.subscription_counts[topic] = number
        elif name == "pulsar_subscription_back_log" and labels.get("subscription"):
            snapshot.backlogs[(topic, labels["subscription"])] = number
    return snapshot
