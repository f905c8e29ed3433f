"""The layout of an archive export: one Parquet dataset, partitioned by day and cluster.

The console writes it (console/analytics/export.py), the jobs read it, the benchmark
generates it. Keeping the columns here means all three agree.

    <export path>/dead_letters/date=YYYY-MM-DD/cluster=<cluster id>/part-b<batch>.parquet

`date` is the UTC day the dead letter was collected into the archive: it never
changes for a row, so a row always belongs to one partition.
"""

from __future__ import annotations

import pyarrow as pa

DATASET = "dead_letters"
PARTITION_DATE = "date"
PARTITION_CLUSTER = "cluster"

_TIMESTAMP = pa.timestamp("us", tz="UTC")

# Columns of each exported row. The payload itself stays in the console: only its
# decoded preview and its size travel, which is what the jobs need.
EXPORT_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("cluster_id", pa.int64()),
        ("cluster_name", pa.string()),
        ("subscription", pa.string()),
        ("source", pa.string()),
        ("payload_preview", pa.string()),
        ("payload_size", pa.int32()),
        # Broker properties/headers, every value as text (non-string JSON values are
        # serialised), so Spark and DuckDB read one plain map type.
        ("properties", pa.map_(pa.string(), pa.string())),
        ("retry_count", pa.int32()),
        ("origin_message_id", pa.string()),
        ("broker_message_id", pa.string()),
        ("first_failure_at", _TIMESTAMP),
        ("last_failure_at", _TIMESTAMP),
        ("collected_at", _TIMESTAMP),
        ("state", pa.string()),
        ("state_changed_at", _TIMESTAMP),
        ("state_reason", pa.string()),
    ]
)
COLUMNS = tuple(EXPORT_SCHEMA.names)

# The archive's states (console.archive.models.DeadLetter), repeated here because the
# pipeline does not import Django.
PARKED, REPLAYING, REPLAYED, FAILED, DISCARDED = "parked", "replaying", "replayed", "failed", "discarded"


def spark_schema():
    """The same columns as a Spark StructType, for DataFrames built in code (tests)."""
    from pyspark.sql import types as T

    timestamp = T.TimestampType()
    return T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("cluster_id", T.LongType(), False),
            T.StructField("cluster_name", T.StringType(), True),
            T.StructField("subscription", T.StringType(), True),
            T.StructField("source", T.StringType(), True),
            T.StructField("payload_preview", T.StringType(), True),
            T.StructField("payload_size", T.IntegerType(), True),
            T.StructField("properties", T.MapType(T.StringType(), T.StringType()), True),
            T.StructField("retry_count", T.IntegerType(), True),
            T.StructField("origin_message_id", T.StringType(), True),
            T.StructField("broker_message_id", T.StringType(), True),
            T.StructField("first_failure_at", timestamp, True),
            T.StructField("last_failure_at", timestamp, True),
            T.StructField("collected_at", timestamp, True),
            T.StructField("state", T.StringType(), True),
            T.StructField("state_changed_at", timestamp, True),
            T.StructField("state_reason", T.StringType(), True),
        ]
    )
