"""Duplicate detection: one message dead-lettered more than once.

Two kinds: the same origin message id twice in one subscription's archive (the
broker delivered and dead-lettered it again, e.g. after a replay that failed again
or a consumer that re-published), and, where a business-key property is configured,
the same business key twice (two messages for one order).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.jobs.clusters import with_cluster_names

ORIGIN = "origin_message_id"
BUSINESS_KEY = "business_key"
# Ids listed per group; the count is always complete.
MAX_IDS = 100


def _groups(letters: DataFrame, keyed: DataFrame, kind: str, key_property: str) -> DataFrame:
    keys = ["cluster_id", "subscription", "key"]
    # Most keys are unique. Counting 64-bit hashes of the keys finds the few that may
    # repeat far faster than counting the strings; ids are then collected only for
    # those. A hash collision only lets a unique key through the pre-filter: the
    # exact count on the real key below drops it again.
    hashed = keyed.select("id", "collected_at", *keys, F.xxhash64(*keys).alias("key_hash"))
    repeated = hashed.groupBy("key_hash").count().where(F.col("count") > 1).select("key_hash")
    grouped = (
        hashed.join(repeated, on="key_hash", how="left_semi")
        .groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.slice(F.sort_array(F.collect_list("id")), 1, MAX_IDS).alias("letter_ids"),
            F.min("collected_at").alias("first_seen"),
            F.max("collected_at").alias("last_seen"),
        )
        .where(F.col("copies") > 1)
    )
    return with_cluster_names(grouped, letters).select(
        F.lit(kind).alias("kind"),
        F.lit(key_property).alias("key_property"),
        "cluster_id",
        "cluster_name",
        "subscription",
        "key",
        "copies",
        "letter_ids",
        "first_seen",
        "last_seen",
    )


def transform(letters: DataFrame, *, business_key: str | None = None) -> DataFrame:
    """(kind, key_property, cluster_id, cluster_name, subscription, key, copies,
    letter_ids, first_seen, last_seen) for every key seen more than once.

    `business_key` names the property holding the key (e.g. "order_id"); without it
    only origin-id duplicates are reported. Empty keys are never duplicates.
    """
    by_origin = _groups(
        letters, letters.where(F.length(ORIGIN) > 0).withColumn("key", F.col(ORIGIN)), ORIGIN, ORIGIN
    )
    if not business_key:
        return by_origin
    value = F.col("properties").getItem(business_key)
    by_business_key = _groups(
        letters, letters.where(F.length(value) > 0).withColumn("key", value), BUSINESS_KEY, business_key
    )
    return by_origin.unionByName(by_business_key)
