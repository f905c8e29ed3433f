"""Run a pulsar-lite broker as a child process (tests, `make run`, benchmarks).

pulsar-lite (PyPI) ships a single binary speaking the Pulsar binary protocol. It has no
admin REST API and ignores deliver-after; it does expose Prometheus metrics, which
the adapter reads for inventory. Its metrics endpoint listens on 0.0.0.0:8080 unless
its TOML config says otherwise: we always write a config binding it to loopback on a
free port, so two brokers (or a user's own service on 8080) never collide.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from brokers.base import BrokerError


def free_port(preferred: int | None = None) -> int:
    """`preferred` if nothing listens there and it can be bound, else any free port."""
    if preferred:
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", preferred))
            return preferred
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: have the kernel stop the broker if the process that started it dies
    without cleaning up (killed), so no stray pulsar-lite keeps the port."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def binary_path() -> str:
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    return find_pulsar_lite_binary()


class EmbeddedPulsar:
    """One pulsar-lite process with its data in `data_dir`.

        broker = EmbeddedPulsar(tmp_path, port=6650)
        broker.start()          # waits until it accepts connections
        broker.service_url      # pulsar://127.0.0.1:6650
        broker.metrics_url      # http://127.0.0.1:<free>/metrics
        broker.stop()
    """

    def __init__(self, data_dir: Path | str, *, port: int | None = None,
                 metrics_port: int | None = None, log_level: str = "warn") -> None:
        self.data_dir = Path(data_dir)
        self.port = port
        self.metrics_port = metrics_port
        self.log_level = log_level
        self.process: subprocess.Popen | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, *, timeout: float = 20.0) -> EmbeddedPulsar:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.port)
        self.metrics_port = free_port(self.metrics_port) if self.metrics_port else free_port()
        config = self.data_dir / "pulsar-lite.toml"
        config.write_text(f'[metrics]\naddr = "127.0.0.1:{self.metrics_port}"\n')
        log = open(self.data_dir / "pulsar-lite.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.process = subprocess.Popen(
                [binary_path(), "--config", str(config), "--addr", f"127.0.0.1:{self.port}",
                 "--db-path", str(self.data_dir / "db"), "--log-level", self.log_level],
                stdout=log, stderr=subprocess.STDOUT, cwd=str(self.data_dir),
                env={**os.environ, "RUST_LOG": self.log_level},
                start_new_session=True,  # Ctrl-C in a terminal goes to the parent, which stops us
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerError(f"pulsar-lite exited at start (see {self.data_dir}/pulsar-lite.log)",
                                  permanent=True)
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise BrokerError(f"pulsar-lite did not listen on port {self.port} within {timeout:g} s")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, *, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)

    def __enter__(self) -> EmbeddedPulsar:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
