"""A local Spark session shared by the whole test session, and a builder of letter rows."""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # py4j logs its shutdown after pytest closed the captured streams: keep it quiet.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pipeline.io import spark_session

    session = spark_session(
        app_name="redrive-tests",
        master="local[2]",
        conf={
            # Tiny data: two shuffle partitions keep each job a few tasks.
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "768m",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
        },
    )
    yield session
    session.stop()


def at(text: str) -> datetime:
    """'2026-11-20 10:00:05' -> an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


_DEFAULTS = {
    "cluster_id": 1,
    "cluster_name": "prod",
    "subscription": "orders-sub",
    "source": "orders",
    "payload_preview": "{}",
    "payload_size": 2,
    "properties": {},
    "retry_count": 0,
    "origin_message_id": "",
    "broker_message_id": "",
    "first_failure_at": None,
    "last_failure_at": None,
    "collected_at": None,
    "state": "parked",
    "state_changed_at": None,
    "state_reason": "",
}


@pytest.fixture
def letters(spark):
    """letters([{field: value}, ...]) -> a DataFrame with the export's schema.

    Unnamed fields take plain defaults; ids count up from 1 unless given.
    """
    from pipeline.schema import COLUMNS, spark_schema

    def build(rows: list[dict]):
        full = []
        for number, row in enumerate(rows, start=1):
            values = {"id": number, **_DEFAULTS, **row}
            values.setdefault("broker_message_id", f"m{values['id']}")
            if values["collected_at"] is None:
                values["collected_at"] = at("2026-11-20 12:00:00")
            full.append(tuple(values[name] for name in COLUMNS))
        return spark.createDataFrame(full, schema=spark_schema())

    return build
