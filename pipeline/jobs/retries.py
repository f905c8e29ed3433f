"""Retry-count histogram and time-to-DLQ percentiles per subscription."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline.jobs.clusters import with_cluster_names

KEYS = ("cluster_id", "subscription")
# Whole percents, so the rank is computed in integers: ceil(total * pct / 100).
PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


def _rank(percent: int):
    """ceil(total * percent / 100) in integer arithmetic (no float rounding at the edges)."""
    return F.floor((F.col("total") * percent + 99) / 100)


def histogram(letters: DataFrame) -> DataFrame:
    """(cluster_id, cluster_name, subscription, retry_count, letters): how many letters
    reached the DLQ after that many retries."""
    counted = letters.groupBy(*KEYS, "retry_count").agg(F.count(F.lit(1)).alias("letters"))
    return with_cluster_names(counted, letters).select(*KEYS, "cluster_name", "retry_count", "letters")


def time_to_dlq(letters: DataFrame) -> DataFrame:
    """Seconds from a letter's first failure to its last (when it was dead-lettered),
    per subscription: letters measured, min, p50, p90, p99, max.

    Percentiles are exact and use the nearest-rank definition: pN is the smallest
    duration d such that at least N% of the letters took d or less. Durations are
    whole seconds, so the job counts letters per (subscription, seconds) first and
    walks that small histogram instead of sorting every letter: exact at any scale.
    Letters without both failure times are left out.
    """
    seconds = (F.unix_timestamp("last_failure_at") - F.unix_timestamp("first_failure_at")).cast("long")
    measured = (
        letters.where(F.col("first_failure_at").isNotNull() & F.col("last_failure_at").isNotNull())
        .select(*KEYS, seconds.alias("seconds"))
        .where(F.col("seconds") >= 0)
    )
    per_duration = measured.groupBy(*KEYS, "seconds").agg(F.count(F.lit(1)).alias("n"))
    running = (
        Window.partitionBy(*KEYS).orderBy("seconds").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    walked = per_duration.withColumn("cumulative", F.sum("n").over(running)).withColumn(
        "total", F.sum("n").over(Window.partitionBy(*KEYS))
    )
    picks = [
        F.min(F.when(F.col("cumulative") >= _rank(percent), F.col("seconds"))).alias(name)
        for name, percent in PERCENTILES.items()
    ]
    percentiles = walked.groupBy(*KEYS).agg(
        F.max("total").alias("letters"),
        F.min("seconds").alias("min_seconds"),
        *picks,
        F.max("seconds").alias("max_seconds"),
    )
    return with_cluster_names(percentiles, letters).select(
        *KEYS, "cluster_name", "letters", "min_seconds", *PERCENTILES, "max_seconds"
    )
