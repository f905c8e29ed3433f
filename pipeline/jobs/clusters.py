"""Cluster names for results grouped by cluster id.

Aggregating a text column (max(cluster_name)) would push Spark from its fast hash
aggregation to a sort-based one over every row; the jobs group by the numeric id
and attach names from this small lookup instead.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def cluster_names(letters: DataFrame) -> DataFrame:
    """(cluster_id, cluster_name): the name on the most recently collected letter
    (a renamed cluster shows its new name)."""
    pairs = letters.groupBy("cluster_id", "cluster_name").agg(F.max("collected_at").alias("seen"))
    return pairs.groupBy("cluster_id").agg(F.max_by("cluster_name", "seen").alias("cluster_name"))


def with_cluster_names(result: DataFrame, letters: DataFrame) -> DataFrame:
    return result.join(F.broadcast(cluster_names(letters)), on="cluster_id", how="left")
