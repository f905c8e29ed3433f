"""Failure overview: per cluster, subscription, source and day, what became of the dead letters."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.jobs.clusters import with_cluster_names
from pipeline.schema import DISCARDED, FAILED, PARKED, REPLAYED, REPLAYING


def _count_state(state: str):
    return F.sum(F.when(F.col("state") == state, 1).otherwise(0)).cast("long")


def transform(letters: DataFrame) -> DataFrame:
    """One row per (cluster_id, subscription, source, day).

    `day` is the UTC day the letter was collected. `replay_success_rate` is replayed
    / (replayed + replay failed): letters still replaying or never replayed are not
    attempts yet; it is null where nothing was attempted.
    """
    counted = letters.groupBy(
        "cluster_id", "subscription", "source", F.to_date("collected_at").alias("day")
    ).agg(
        F.count(F.lit(1)).alias("dead_letters"),
        _count_state(REPLAYED).alias("replayed"),
        _count_state(DISCARDED).alias("discarded"),
        _count_state(PARKED).alias("parked"),
        _count_state(FAILED).alias("replay_failed"),
        _count_state(REPLAYING).alias("replaying"),
    )
    attempts = F.col("replayed") + F.col("replay_failed")
    return with_cluster_names(counted, letters).select(
        "cluster_id",
        "cluster_name",
        "subscription",
        "source",
        "day",
        "dead_letters",
        "replayed",
        "discarded",
        "parked",
        "replay_failed",
        "replaying",
        F.when(attempts > 0, F.col("replayed") / attempts)
        .otherwise(F.lit(None).cast("double"))
        .alias("replay_success_rate"),
    )
