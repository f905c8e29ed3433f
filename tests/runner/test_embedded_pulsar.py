"""The embedded pulsar-lite of `make run` and its cluster row."""

from __future__ import annotations

import socket

from brokers.pulsar.embedded import free_port


def test_a_taken_port_moves_the_broker_to_a_free_one_with_metrics_on_loopback(tmp_path):
    from console.runner.embedded_pulsar import embedded_pulsar_start

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        broker = embedded_pulsar_start(var_dir=tmp_path, port=busy, metrics_port=free_port())
        try:
            assert broker is not None and broker.running()
            assert broker.port != busy
            assert broker.metrics_url.startswith("http://127.0.0.1:")
            assert (tmp_path / "pulsar-lite" / "pulsar-lite.toml").read_text().count("127.0.0.1") == 1
            with socket.create_connection(("127.0.0.1", broker.port), timeout=2):
                pass
        finally:
            if broker is not None:
                broker.stop()
    assert not broker.running()


def test_a_broker_that_cannot_start_is_reported_not_raised(tmp_path):
    from console.runner.embedded_pulsar import embedded_pulsar_start

    (tmp_path / "pulsar-lite").write_text("not a directory")
    assert embedded_pulsar_start(var_dir=tmp_path) is None


def test_the_embedded_cluster_follows_the_broker_and_keeps_the_users_options(db):
    from console.clusters.models import Cluster
    from console.runner.services import embedded_pulsar_cluster_ensure

    first = embedded_pulsar_cluster_ensure(service_url="pulsar://127.0.0.1:6650",
                                           metrics_url="http://127.0.0.1:6651/metrics")
    assert (first.kind, first.options["naming_version"]) == ("pulsar", "2.9")
    Cluster.objects.filter(pk=first.pk).update(options={**first.options, "console_subscription": "ops"})

    again = embedded_pulsar_cluster_ensure(service_url="pulsar://127.0.0.1:40001",
                                           metrics_url="http://127.0.0.1:40002/metrics")
    assert again.pk == first.pk
    assert again.service_url == "pulsar://127.0.0.1:40001"
    assert again.options == {"metrics_url": "http://127.0.0.1:40002/metrics", "naming_version": "2.9",
                             "console_subscription": "ops"}
    assert Cluster.objects.filter(name="embedded-pulsar").count() == 1
