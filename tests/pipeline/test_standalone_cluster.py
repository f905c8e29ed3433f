"""The cluster path for real: a Spark standalone master and worker started from the
PySpark install, the nightly jobs submitted to them with --master spark://..., and
their results compared with the same transforms run in local mode."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import io
from pipeline.jobs.replay_candidates import ReplayPolicy
from pipeline.run import nightly_jobs
from pipeline.schema import EXPORT_SCHEMA
from pipeline.submit import SubmitOptions, spark_home, submit

POLICY = {"states": ["parked", "failed"], "reason_matches": "timeout", "limit": 50}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_export(root: Path, n: int = 1500) -> None:
    """A small export in the console's layout: two clusters, three days, mixed states."""
    rng = random.Random(7)
    start = datetime(2026, 11, 18, tzinfo=UTC)
    errors = [
        "TimeoutException: no reply within {} ms",
        "order {} not found",
        "ValidationError: bad sku 'S-{}'",
    ]
    rows: dict[tuple[str, int], list[dict]] = {}
    for i in range(1, n + 1):
        cluster = 1 + i % 2
        collected = start + timedelta(minutes=rng.randrange(3 * 24 * 60))
        first = collected - timedelta(seconds=rng.randrange(1, 5000))
        row = {
            "id": i,
            "cluster_id": cluster,
            "cluster_name": f"c{cluster}",
            "subscription": rng.choice(["orders", "orders", "orders", "billing", "audit"]),
            "source": "src",
            "payload_preview": "{}",
            "payload_size": 2,
            "properties": [
                ("error", rng.choice(errors).format(rng.randrange(10_000))),
                ("order_id", f"A-{rng.randrange(n)}"),
            ],
            "retry_count": rng.randrange(17),
            "origin_message_id": f"o-{rng.randrange(n)}",
            "broker_message_id": f"m-{i}",
            "first_failure_at": first,
            "last_failure_at": collected,
            "collected_at": collected,
            "state": rng.choice(["parked", "parked", "replayed", "failed", "discarded"]),
            "state_changed_at": None,
            "state_reason": "",
        }
        rows.setdefault((collected.date().isoformat(), cluster), []).append(row)
    for (day, cluster), part in rows.items():
        folder = root / "dead_letters" / f"date={day}" / f"cluster={cluster}"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(part, schema=EXPORT_SCHEMA), folder / "part-b00000001.parquet")


def _canonical(rows) -> list[str]:
    return sorted(json.dumps(row.asDict(recursive=True), sort_keys=True, default=str) for row in rows)


@pytest.fixture
def standalone_cluster(tmp_path):
    """A master and one worker (1 core, 768 MB) on 127.0.0.1; both stopped afterwards."""
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui_port = _free_port(), _free_port()
    processes = []
    logs = []

    def start(args: list[str], name: str) -> None:
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed below
        logs.append(log)
        # A session of its own, so the whole process group (java and its children) is stopped.
        processes.append(
            subprocess.Popen(
                [spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui_port),
            ],
            "master",
        )
        start(
            [
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--port",
                str(_free_port()),
                "--webui-port",
                str(_free_port()),
                "--cores",
                "1",
                "--memory",
                "768m",
                "--work-dir",
                str(tmp_path / "work"),
            ],
            "worker",
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
                    if json.load(answer).get("aliveworkers", 0) >= 1:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                pytest.fail(
                    "Spark master/worker did not come up: "
                    + (tmp_path / "master.log").read_text(errors="replace")[-2000:]
                    + (tmp_path / "worker.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}"
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        for log in logs:
            log.close()
        assert all(process.poll() is not None for process in processes)


@pytest.mark.timeout(600)
def test_nightly_jobs_on_a_standalone_cluster_match_local_mode(spark, standalone_cluster, tmp_path):
    export = tmp_path / "export"
    _write_export(export)
    output = tmp_path / "results"

    summary = submit(
        input_path=str(export),
        output_path=str(output),
        options=SubmitOptions(
            master=standalone_cluster,
            driver_memory="512m",
            executor_memory="512m",
            total_executor_cores=1,
            shuffle_partitions=2,
            business_key="order_id",
            replay_policy=POLICY,
        ),
        work_dir=tmp_path,
        timeout=480,
        env={"SPARK_LOCAL_IP": "127.0.0.1"},
    )

    assert summary["master"] == standalone_cluster and summary["input_rows"] == 1500
    letters = io.read_archive(spark, str(export))
    local = nightly_jobs(business_key="order_id", policy=ReplayPolicy.from_dict(POLICY))
    assert set(summary["jobs"]) == set(local)
    for name, transform in local.items():
        expected = _canonical(transform(letters).collect())
        assert expected, name  # every job has something to compare on this data
        assert _canonical(spark.read.parquet(str(output / name)).collect()) == expected, name
