"""AMQP connection parameters from a ClusterConfig, and pika errors as BrokerError."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import pika
import pika.exceptions

from brokers.base import BrokerError, ClusterConfig

DEFAULT_VHOST = "/"


def vhost_of(config: ClusterConfig) -> str:
    """The vhost: `options["vhost"]`, else the path of the amqp URL (`/%2F` is "/")."""
    if config.options.get("vhost"):
        return str(config.options["vhost"])
    try:
        path = urlsplit(config.service_url).path
    except ValueError as exc:
        raise BrokerError(f"cannot read the service URL: {exc}", permanent=True) from exc
    if not path or path == "/":
        return DEFAULT_VHOST
    return unquote(path[1:])


def connection_parameters(config: ClusterConfig, *, purpose: str = "console") -> pika.ConnectionParameters:
    """Parameters for the cluster: URL for host/port/TLS, credentials from the config
    (falling back to the URL's), the vhost of `vhost_of`, the config's timeout."""
    url = config.service_url or ""
    if not url.startswith(("amqp://", "amqps://")):
        scheme = url.split("://", 1)[0] + "://" if "://" in url else "no scheme"
        raise BrokerError(f"a RabbitMQ service URL starts with amqp:// or amqps://, not {scheme[:20]!r}",
                          permanent=True)
    try:
        parameters = pika.URLParameters(url)
    except (ValueError, TypeError) as exc:
        raise BrokerError(f"cannot read the service URL: {exc}", permanent=True) from exc
    if config.username:
        parameters.credentials = pika.PlainCredentials(config.username, config.password)
    parameters.virtual_host = vhost_of(config)
    parameters.connection_attempts = 1
    parameters.socket_timeout = config.timeout_seconds
    parameters.stack_timeout = config.timeout_seconds * 2
    parameters.blocked_connection_timeout = max(config.timeout_seconds * 6, 30)
    parameters.client_properties = {"connection_name": f"redrive {purpose} ({config.name})"}
    return parameters


def broker_error(exc: BaseException, config: ClusterConfig, *, doing: str = "talking to RabbitMQ"
                 ) -> BrokerError:
    """One clear BrokerError for whatever pika raised (never echoing the password)."""
    try:
        vhost = vhost_of(config)
        user = config.username or unquote(urlsplit(config.service_url).username or "") or "guest"
    except (BrokerError, ValueError):
        vhost, user = "?", config.username or "guest"
    if isinstance(exc, BrokerError):
        return exc
    if isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        return BrokerError(f"RabbitMQ denied access to vhost {vhost!r}: it does not exist or "
                           f"user {user!r} has no permission on it", permanent=True)
    if isinstance(exc, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError):
        return BrokerError(f"RabbitMQ refused the credentials of user {user!r}",
                           permanent=True)
    if isinstance(exc, pika.exceptions.ConnectionClosedByBroker):
        if exc.reply_code == 530:
            return BrokerError(f"RabbitMQ refused vhost {vhost!r}: {exc.reply_text}", permanent=True)
        if exc.reply_code == 403:
            return BrokerError(f"RabbitMQ refused access: {exc.reply_text}", permanent=True)
        return BrokerError(f"RabbitMQ closed the connection while {doing}: {exc.reply_text}")
    if isinstance(exc, pika.exceptions.ChannelClosedByBroker):
        if exc.reply_code == 404:
            return BrokerError(f"not found while {doing}: {exc.reply_text}", permanent=True)
        if exc.reply_code in (403, 406):
            return BrokerError(f"RabbitMQ refused while {doing}: {exc.reply_text}", permanent=True)
        return BrokerError(f"RabbitMQ closed the channel while {doing}: {exc.reply_text}")
    if isinstance(exc, pika.exceptions.AMQPConnectionError):
        return BrokerError(f"cannot reach RabbitMQ at {_where(config)} while {doing}: "
                           f"{type(exc).__name__}")
    if isinstance(exc, pika.exceptions.AMQPError | OSError):
        return BrokerError(f"RabbitMQ failed while {doing}: {type(exc).__name__}: {exc}")
    return BrokerError(f"unexpected error while {doing}: {type(exc).__name__}: {exc}")


def _where(config: ClusterConfig) -> str:
    try:
        parts = urlsplit(config.service_url)
        return f"{parts.hostname}:{parts.port or 5672}"
    except ValueError:
        return "(an unreadable address)"


@contextlib.contextmanager
def blocking_connection(config: ClusterConfig, *, doing: str, purpose: str = "console"
                        ) -> Iterator[pika.BlockingConnection]:
    """A BlockingConnection closed on exit; any pika error becomes a BrokerError."""
    parameters = connection_parameters(config, purpose=purpose)
    connection: pika.BlockingConnection | None = None
    try:
        connection = pika.BlockingConnection(parameters)
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise broker_error(exc, config, doing=doing) from exc
    try:
        yield connection
    except pika.exceptions.AMQPError as exc:
        # Only pika's own errors are translated: whatever a caller's code raised inside
        # (a sink failing, say) goes up unchanged.
        raise broker_error(exc, config, doing=doing) from exc
    finally:
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):
                connection.close()


def server_version(connection: Any) -> str:
    """The server's version as it announced it on connect, or ""."""
    try:
        properties = connection._impl.server_properties or {}
    except AttributeError:
        return ""
    version = properties.get("version", b"")
    return version.decode() if isinstance(version, bytes) else str(version)
