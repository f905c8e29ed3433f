"""The few calls Redrive makes to RabbitMQ's management HTTP API (read-only).

Queue depths and rates there are sampled by the broker every few seconds (the
`collect_statistics_interval`, 5 s by default), so they may lag a little; the AMQP
side is used wherever an exact count matters (collect, discard).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import requests

from brokers.base import BrokerError, ClusterConfig


class ManagementClient:
    def __init__(self, config: ClusterConfig, vhost: str) -> None:
        if not config.admin_url:
            raise BrokerError("the cluster has no management API URL (admin_url, e.g. "
                              "http://127.0.0.1:15672): the inventory needs it", permanent=True)
        if not config.admin_url.startswith(("http://", "https://")):
            raise BrokerError("the management API URL must start with http:// or https://",
                              permanent=True)
        try:
            parts = urlsplit(config.admin_url)
            port = parts.port
        except ValueError as exc:
            raise BrokerError(f"cannot read the management API URL: {exc}", permanent=True) from exc
        # Credentials written into the URL are used (when the config has none) but never
        # kept in the address that error messages show.
        url_user, url_password = unquote(parts.username or ""), unquote(parts.password or "")
        netloc = parts.hostname or ""
        if port:
            netloc += f":{port}"
        self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")) + "/api"
        self.vhost = vhost
        if config.username:
            self.username, password = config.username, config.password
        elif url_user:
            self.username, password = url_user, url_password
        else:
            self.username, password = "guest", "guest"
        self.timeout = config.timeout_seconds
        self.session = requests.Session()
        self.session.auth = (self.username, password)

    def close(self) -> None:
        self.session.close()

    def _get(self, path: str, *, params: dict[str, str] | None = None, missing_ok: bool = False) -> Any:
        url = self.base + path
        try:
            response = self.session.get(url, params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise BrokerError(f"cannot reach the RabbitMQ management API at {self.base}: "
                              f"{type(exc).__name__}") from exc
        if response.status_code == 401:
            raise BrokerError(f"the RabbitMQ management API refused the credentials of user "
                              f"{self.username!r}", permanent=True)
        if response.status_code == 403:
            raise BrokerError(f"user {self.username!r} may not use the management API "
                              "(it needs the 'monitoring' or 'management' tag)", permanent=True)
        if response.status_code == 404:
            if missing_ok:
                return None
            raise BrokerError(f"not found in the management API: {path}", permanent=True)
        if response.status_code >= 400:
            raise BrokerError(f"the management API answered {response.status_code} for {path}",
                              permanent=400 <= response.status_code < 500)
        try:
            return response.json()
        except ValueError as exc:
            raise BrokerError(f"the management API at {self.base} did not answer JSON") from exc

    @property
    def _v(self) -> str:
        return quote(self.vhost, safe="")

    def overview(self) -> dict[str, Any]:
        return self._get("/overview")

    def check_vhost(self) -> None:
        if self._get(f"/vhosts/{self._v}", missing_ok=True) is None:
            raise BrokerError(f"vhost {self.vhost!r} does not exist on the cluster", permanent=True)

    def queues(self) -> list[dict[str, Any]]:
        result = self._get(f"/queues/{self._v}", missing_ok=True)
        if result is None:
            self.check_vhost()
            return []
        return result

    def queue(self, name: str) -> dict[str, Any] | None:
        return self._get(f"/queues/{self._v}/{quote(name, safe='')}", missing_ok=True)

    def exchange(self, name: str) -> dict[str, Any] | None:
        return self._get(f"/exchanges/{self._v}/{quote(name, safe='')}", missing_ok=True)

    def bindings_from(self, exchange: str) -> list[dict[str, Any]]:
        return self._get(f"/exchanges/{self._v}/{quote(exchange, safe='')}/bindings/source",
                         missing_ok=True) or []
