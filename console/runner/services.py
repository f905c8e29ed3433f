"""The embedded set-up a newcomer gets from `make run`.

Default clusters point at the local services; an admin login is made once and its
password kept in var/ so every later run prints the same login.
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from console.accounts.services import user_create_with_role
from console.clusters.models import Cluster

DEMO_ADMIN = "admin"


@dataclass(frozen=True)
class DefaultCluster:
    name: str
    kind: str
    service_url: str
    admin_url: str = ""
    username: str = ""
    password: str = ""


def default_clusters() -> list[DefaultCluster]:
    return [
        DefaultCluster("local-rabbitmq", Cluster.KIND_RABBITMQ, "amqp://127.0.0.1:5672/%2F",
                       "http://127.0.0.1:15672", "guest", "guest"),
        DefaultCluster("local-rocketmq", Cluster.KIND_ROCKETMQ, settings.ROCKETMQ_DEFAULT_URL),
    ]


def default_clusters_ensure() -> list[Cluster]:
    """Create each default cluster that does not exist yet; never touch an edited one."""
    made = []
    for default in default_clusters():
        cluster, created = Cluster.objects.get_or_create(
            name=default.name,
            defaults={"kind": default.kind, "service_url": default.service_url,
                      "admin_url": default.admin_url, "username": default.username},
        )
        if created and default.password:
            cluster.password = default.password
            cluster.save(update_fields=["password_encrypted"])
        made.append(cluster)
    return made


def embedded_pulsar_cluster_ensure(*, service_url: str, metrics_url: str) -> Cluster:
    """The "embedded-pulsar" cluster, pointed at the broker this run started.

    Created on the first run; on later runs only the broker's address and metrics URL
    are updated (the port may differ when 6650 was taken), other edits are kept.
    """
    from console.runner.embedded_pulsar import EMBEDDED_PULSAR_NAME

    cluster, created = Cluster.objects.get_or_create(
        name=EMBEDDED_PULSAR_NAME,
        defaults={"kind": Cluster.KIND_PULSAR, "service_url": service_url,
                  "options": {"metrics_url": metrics_url, "naming_version": "2.9"},
                  "collect_interval_seconds": 60},
    )
    options = dict(cluster.options or {})
    if not created and (cluster.service_url != service_url or options.get("metrics_url") != metrics_url):
        options["metrics_url"] = metrics_url
        cluster.service_url, cluster.options = service_url, options
        cluster.save(update_fields=["service_url", "options"])
    return cluster


def default_cluster_names() -> set[str]:
    """The clusters `make run` sets up itself (the demo runs only on these)."""
    from console.runner.embedded_pulsar import EMBEDDED_PULSAR_NAME

    return {d.name for d in default_clusters()} | {EMBEDDED_PULSAR_NAME}


def demo_admin_ensure(*, var_dir: Path | None = None) -> tuple[str, str]:
    """(username, password) of the embedded admin, created on the first run."""
    var_dir = var_dir or settings.VAR_DIR
    password_file = var_dir / "admin-password"
    if password_file.exists():
        password = password_file.read_text().strip()
    else:
        password = secrets.token_urlsafe(12)
        var_dir.mkdir(parents=True, exist_ok=True)
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
    user_create_with_role(username=DEMO_ADMIN, password=password, role="admin")
    return DEMO_ADMIN, password


def tcp_reachable(url: str, *, default_port: int, timeout: float = 1.0) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port),
                                      timeout=timeout):
            return True
    except OSError:
        return False
