"""Top failure reasons: dead letters grouped by exception class and normalised error text.

Consumers record why a message failed in its properties; the keys differ between
client libraries, so the first non-empty key of each list below wins. The error text
is normalised (quoted strings, UUIDs, hex and mixed ids, numbers masked) so that
"order 1234 not found" and "order 98 not found" are one reason.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Properties naming the exception class, most specific first.
ERROR_CLASS_KEYS = ("exception_class", "error_class", "exception", "error_type", "x-exception-class")
# Properties holding the error text, most specific first.
ERROR_TEXT_KEYS = ("error_message", "exception_message", "x-exception-message", "error", "reason")

# A class-like name at the start of the text ("TimeoutException: ...") names the
# class when no property does.
CLASS_IN_TEXT = r"^\s*([A-Za-z_][A-Za-z0-9_.$]*(?:Exception|Error|Timeout|Fault))\b"
NO_CLASS = "(unknown)"
PATTERN_CHARS = 300

# (regex, replacement), applied in order. Every regex is in the subset that Java
# (Spark) and RE2 (the DuckDB reference in bench/) read the same way, alternatives
# leftmost-first. Few passes on purpose: each pass costs a copy of every text.
NORMALISATION = (
    # Quoted values, either quote.
    (r"'[^']*'|\"[^\"]*\"", "'?'"),
    # Ids: UUIDs, 0x..., hex runs of 8+, and tokens mixing letters and digits
    # (ord_8f3Kz19, user42, 9ab7c), all starting at a word boundary so the engine
    # gives up at once inside ordinary words. A number with a unit (30s, 500ms) is
    # not an id: its number is masked by the next pass.
    (
        r"\b(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        r"|0[xX][0-9a-fA-F]+|[0-9a-fA-F]{8,}"
        r"|[A-Za-z_]+[0-9][A-Za-z0-9_-]*|[0-9]+[A-Za-z_]+[0-9][A-Za-z0-9_-]*)\b",
        "<id>",
    ),
    (r"[0-9]+(\.[0-9]+)?", "<n>"),
    (r"\s+", " "),
)


def _non_empty(column: Column) -> Column:
    return F.when(F.length(column) > 0, column)


def error_text(properties: str = "properties") -> Column:
    props = F.col(properties)
    return F.coalesce(*[_non_empty(props.getItem(key)) for key in ERROR_TEXT_KEYS], F.lit(""))


def error_class(properties: str = "properties") -> Column:
    props = F.col(properties)
    from_text = _non_empty(F.regexp_extract(error_text(properties), CLASS_IN_TEXT, 1))
    return F.coalesce(
        *[_non_empty(F.trim(props.getItem(key))) for key in ERROR_CLASS_KEYS], from_text, F.lit(NO_CLASS)
    )


def normalise(text: Column) -> Column:
    for pattern, replacement in NORMALISATION:
        text = F.regexp_replace(text, pattern, replacement)
    return F.substring(F.trim(text), 1, PATTERN_CHARS)


def with_reason(letters: DataFrame) -> DataFrame:
    """The letters with `error_class`, `error_text` and `error_pattern` columns added."""
    return (
        letters.withColumn("error_text", error_text())
        .withColumn("error_class", error_class())
        .withColumn("error_pattern", normalise(F.col("error_text")))
    )


def transform(letters: DataFrame) -> DataFrame:
    """One row per (error_class, error_pattern), most letters first.

    Each row says how many letters, in how many subscriptions, when first and last
    collected, and gives one example: the letter with the lowest id, its raw text.
    Counting per subscription first, then per reason, keeps every aggregation on
    numbers (fast hash aggregation); the example's text is looked up by id at the end.
    """
    per_subscription = (
        with_reason(letters)
        .groupBy("error_class", "error_pattern", "cluster_id", "subscription")
        .agg(
            F.count(F.lit(1)).alias("letters"),
            F.min("collected_at").alias("first_seen"),
            F.max("collected_at").alias("last_seen"),
            F.min("id").alias("example_letter_id"),
        )
    )
    per_reason = per_subscription.groupBy("error_class", "error_pattern").agg(
        F.sum("letters").alias("letters"),
        F.count(F.lit(1)).alias("subscriptions"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
        F.min("example_letter_id").alias("example_letter_id"),
    )
    examples = letters.select(
        F.col("id").alias("example_letter_id"),
        error_text().alias("example_text"),
        F.col("subscription").alias("example_subscription"),
    )
    return (
        per_reason.join(examples, on="example_letter_id", how="inner")
        .select(
            "error_class",
            "error_pattern",
            "letters",
            "subscriptions",
            "first_seen",
            "last_seen",
            "example_letter_id",
            "example_text",
            "example_subscription",
        )
        .orderBy(F.desc("letters"), "error_class", "error_pattern")
    )
