"""Benchmark: the nightly Spark jobs over a synthetic archive export, against DuckDB.

    .venv/bin/python bench/pipeline_nightly.py --n 10000000

Generates an export of N dead letters in the console's layout (Parquet partitioned
by date and cluster, pipeline/schema.py): skewed subscriptions and clusters, 200
error templates whose ids, numbers and quoted values vary per letter, retry counts
0..16, payload previews of 200 B to 2 KB. Times each nightly job on local[2]
(records per second, the JVM's peak resident memory), then computes the same
aggregates with DuckDB over the same files as a straightforward single-process
reference: every result must be equal, and the reference's speed is the baseline
of the ratio. Last line: one JSON object (name, n, rate, baseline_rate, ratio, ...).

The export is generated directly (not through the console's exporter, which the
tests cover) so that 10 million rows take a minute, not an hour of database inserts.
It is kept under --dir and reused by the next run with the same --n and --seed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipeline import io  # noqa: E402
from pipeline.jobs import reasons as reasons_job  # noqa: E402
from pipeline.jobs.replay_candidates import ReplayPolicy  # noqa: E402
from pipeline.run import nightly_jobs  # noqa: E402
from pipeline.schema import EXPORT_SCHEMA  # noqa: E402

DAYS = 30
CLUSTERS = {1: ("prod-eu", 0.7), 2: ("prod-us", 0.2), 3: ("staging", 0.1)}
SUBSCRIPTIONS = 50
BUSINESS_KEY = "order_id"
POLICY = {
    "states": ["parked", "failed"],
    "reason_matches": "timeout|unavailable|connection",
    "limit": 100_000,
}
START = datetime(2026, 10, 1, tzinfo=UTC)

CLASSES = [
    "TimeoutException",
    "ConnectionResetError",
    "OrderNotFound",
    "ValidationError",
    "PaymentDeclined",
    "DeadlockDetected",
    "ServiceUnavailable",
    "SerializationError",
    "QuotaExceeded",
    "AuthExpired",
    "InventoryMismatch",
    "DuplicateKeyError",
    "RateLimited",
    "SchemaMismatch",
    "NullPointerException",
    "IllegalStateException",
    "BrokenPipeError",
    "CircuitOpen",
    "DiskFullError",
    "UnknownCurrency",
]
# Message shapes; {n} a number, {uuid}/{hex}/{tenant} ids, {quoted} a quoted value.
SHAPES = [
    ["no reply from 10.0.", "{n}", ".", "{n}", ":", "{n}", " within ", "{n}", " ms"],
    ["order ", "{n}", " not found"],
    ["message ", "{uuid}", " rejected by downstream"],
    ["ledger 0x", "{hex}", " lost at entry ", "{n}"],
    ["key '", "{quoted}", "' is locked by worker ", "{n}"],
    ["quota exceeded for tenant ", "{tenant}"],
    ["connection reset by peer after ", "{n}", " bytes"],
    ['invalid sku "', "{quoted}", '" in line ', "{n}"],
    ["deadline of ", "{n}", ".", "{n}", "s exceeded on shard ", "{n}"],
    ["duplicate key value violates unique constraint (id)=(", "{n}", ")"],
]
STATES = (["parked", "replayed", "failed", "discarded", "replaying"], [0.55, 0.25, 0.05, 0.14, 0.01])


# --- Synthetic export -------------------------------------------------------------


class Generator:
    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)
        weights = 1 / np.arange(1, SUBSCRIPTIONS + 1) ** 1.2  # a few busy subscriptions, a long tail
        self.subscription_p = weights / weights.sum()
        self.subscriptions = pa.array([f"sub-{i:02d}" for i in range(SUBSCRIPTIONS)])
        self.sources = pa.array([f"topic-{i // 3:02d}" for i in range(SUBSCRIPTIONS)])
        template_weights = 1 / np.arange(1, 201) ** 0.8
        self.template_p = template_weights / template_weights.sum()
        self.template_class = pa.array([CLASSES[t % len(CLASSES)] for t in range(200)])
        # A third of the consumers record no class property, only "Class: text".
        self.class_in_text = np.array([t % 3 == 0 for t in range(200)])
        self.uuids = pa.array([str(uuid.UUID(int=int(x))) for x in self.rng.integers(0, 2**62, 50_000)])
        self.hexes = pa.array([f"{int(x):x}" for x in self.rng.integers(2**32, 2**48, 50_000)])
        self.tenants = pa.array([f"t{int(x)}x{int(x) % 97}" for x in self.rng.integers(10, 99_999, 50_000)])
        self.quoted = pa.array([f"S-{int(x)}" for x in self.rng.integers(0, 99_999, 50_000)])
        lengths = self.rng.integers(200, 2049, 4096)
        self.payloads = pa.array(
            [
                '{"order": ' + str(i) + ', "pad": "' + "x" * max(int(length) - 30, 1) + '"}'
                for i, length in enumerate(lengths)
            ]
        )

    def _part(self, kind: str, rows: int) -> pa.Array:
        pools = {"{uuid}": self.uuids, "{hex}": self.hexes, "{tenant}": self.tenants, "{quoted}": self.quoted}
        if kind == "{n}":
            return pc.cast(pa.array(self.rng.integers(0, 100_000, rows)), pa.string())
        pool = pools[kind]
        return pool.take(pa.array(self.rng.integers(0, len(pool), rows)))

    def _texts(self, templates: np.ndarray) -> tuple[pa.Array, pa.Array]:
        rows = len(templates)
        shape_texts = []
        for shape in SHAPES:
            parts = [self._part(p, rows) if p.startswith("{") else pa.scalar(p) for p in shape]
            shape_texts.append(pc.binary_join_element_wise(*parts, ""))
        stacked = pa.concat_arrays(shape_texts)
        shape_of = templates // len(CLASSES) % len(SHAPES)
        texts = stacked.take(pa.array(shape_of * rows + np.arange(rows)))
        classes = self.template_class.take(pa.array(templates))
        in_text = pa.array(self.class_in_text[templates])
        texts = pc.if_else(in_text, pc.binary_join_element_wise(classes, pa.scalar(": "), texts, ""), texts)
        class_property = pc.if_else(in_text, pa.scalar(""), classes)
        return class_property, texts

    def partition(self, first_id: int, rows: int, cluster_id: int, day: int) -> pa.Table:
        rng = self.rng
        ids = np.arange(first_id, first_id + rows, dtype=np.int64)
        subscription_index = pa.array(rng.choice(SUBSCRIPTIONS, rows, p=self.subscription_p))
        templates = rng.choice(200, rows, p=self.template_p)
        class_property, texts = self._texts(templates)
        order_ids = pc.binary_join_element_wise(
            pa.scalar("A-"), pc.cast(pa.array(rng.integers(0, self.n // 2 + 1, rows)), pa.string()), ""
        )
        keys = pa.DictionaryArray.from_arrays(
            pa.array(np.tile(np.arange(3, dtype=np.int32), rows)),
            pa.array(["exception_class", "error_message", BUSINESS_KEY]),
        ).cast(pa.string())
        interleave = (np.arange(rows)[:, None] + np.array([0, rows, 2 * rows])[None, :]).ravel()
        items = pa.concat_arrays([class_property, texts, order_ids]).take(pa.array(interleave))
        properties = pa.MapArray.from_arrays(
            pa.array(np.arange(0, 3 * rows + 1, 3, dtype=np.int32)), keys, items
        )
        base = int((START + timedelta(days=day)).timestamp())
        collected = base + rng.integers(0, 86_400, rows)
        first_failure = collected - rng.integers(0, 7_200, rows)
        retries = np.where(rng.random(rows) < 0.6, 16, rng.integers(0, 16, rows))
        origin = pc.binary_join_element_wise(
            pa.scalar("o-"), pc.cast(pa.array(rng.integers(0, int(self.n * 0.99), rows)), pa.string()), ""
        )
        state = pa.array(STATES[0]).take(pa.array(rng.choice(len(STATES[0]), rows, p=STATES[1])))
        payload = self.payloads.take(pa.array(rng.integers(0, len(self.payloads), rows)))

        def seconds(values) -> pa.Array:
            return pa.array(values * 1_000_000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))

        columns = {
            "id": pa.array(ids),
            "cluster_id": pa.array(np.full(rows, cluster_id, dtype=np.int64)),
            "cluster_name": pa.array([CLUSTERS[cluster_id][0]] * rows),
            "subscription": self.subscriptions.take(subscription_index),
            "source": self.sources.take(subscription_index),
            "payload_preview": payload,
            "payload_size": pc.cast(pc.binary_length(payload), pa.int32()),
            "properties": properties,
            "retry_count": pa.array(retries.astype(np.int32)),
            "origin_message_id": origin,
            "broker_message_id": pc.binary_join_element_wise(
                pa.scalar("m-"), pc.cast(pa.array(ids), pa.string()), ""
            ),
            "first_failure_at": seconds(first_failure),
            "last_failure_at": seconds(collected),
            "collected_at": seconds(collected),
            "state": state,
            "state_changed_at": pa.nulls(rows, pa.timestamp("us", tz="UTC")),
            "state_reason": pa.array([""] * rows),
        }
        return pa.Table.from_pydict(columns, schema=EXPORT_SCHEMA)


def generate(export: Path, n: int, seed: int) -> float:
    marker = export / "bench.json"
    if marker.exists() and json.loads(marker.read_text()) == {"n": n, "seed": seed}:
        return 0.0
    started = time.perf_counter()
    shutil.rmtree(export, ignore_errors=True)
    generator = Generator(n, seed)
    next_id = 1
    shares = [(cluster_id, weight / DAYS) for cluster_id, (_, weight) in CLUSTERS.items()]
    remaining = n
    partitions = [(day, cluster_id, share) for day in range(DAYS) for cluster_id, share in shares]
    for index, (day, cluster_id, share) in enumerate(partitions):
        rows = remaining if index == len(partitions) - 1 else min(remaining, round(n * share))
        if rows <= 0:
            continue
        remaining -= rows
        folder = (
            export / "dead_letters" / f"date={(START + timedelta(days=day)).date()}" / f"cluster={cluster_id}"
        )
        folder.mkdir(parents=True, exist_ok=True)
        for offset in range(0, rows, 500_000):
            chunk = min(500_000, rows - offset)
            pq.write_table(
                generator.partition(next_id, chunk, cluster_id, day),
                folder / f"part-b{offset // 500_000 + 1:08d}.parquet",
                compression="zstd",
            )
            next_id += chunk
    marker.write_text(json.dumps({"n": n, "seed": seed}))
    return time.perf_counter() - started


# --- DuckDB reference -------------------------------------------------------------


def _sql_text() -> str:
    keys = ", ".join(f"nullif(properties['{key}'], '')" for key in reasons_job.ERROR_TEXT_KEYS)
    return f"coalesce({keys}, '')"


def _sql_class(text: str) -> str:
    keys = ", ".join(f"nullif(trim(properties['{key}']), '')" for key in reasons_job.ERROR_CLASS_KEYS)
    from_text = f"nullif(regexp_extract({text}, '{reasons_job.CLASS_IN_TEXT}', 1), '')"
    return f"coalesce({keys}, {from_text}, '{reasons_job.NO_CLASS}')"


def _sql_pattern(text: str) -> str:
    for pattern, replacement in reasons_job.NORMALISATION:
        pattern, replacement = pattern.replace("'", "''"), replacement.replace("'", "''")
        text = f"regexp_replace({text}, '{pattern}', '{replacement}', 'g')"
    return f"substring(trim({text}), 1, {reasons_job.PATTERN_CHARS})"


def reference_queries(files: str) -> dict[str, str]:
    letters = f"read_parquet('{files}', hive_partitioning = false)"
    with_reason = (
        f"(SELECT *, {_sql_class('error_text')} AS error_class, "
        f"{_sql_pattern('error_text')} AS error_pattern "
        f"FROM (SELECT *, {_sql_text()} AS error_text FROM {letters}))"
    )
    state_count = "count(*) FILTER (WHERE state = '{}')"
    rank = "floor((total * {p} + 99) / 100)"
    policy = ReplayPolicy.from_dict(POLICY)
    states = ", ".join(f"'{s}'" for s in policy.states)
    return {
        "overview": f"""
            SELECT cluster_id, max(cluster_name) AS cluster_name, subscription, source,
                   collected_at::DATE AS day,
                   count(*) AS dead_letters, {state_count.format("replayed")} AS replayed,
                   {state_count.format("discarded")} AS discarded, {state_count.format("parked")} AS parked,
                   {state_count.format("failed")} AS replay_failed,
                   {state_count.format("replaying")} AS replaying,
                   CASE WHEN replayed + replay_failed > 0 THEN replayed / (replayed + replay_failed) END
                       AS replay_success_rate
            FROM {letters} GROUP BY cluster_id, subscription, source, day""",
        "retry_histogram": f"""
            SELECT cluster_id, subscription, max(cluster_name) AS cluster_name, retry_count,
                   count(*) AS letters
            FROM {letters} GROUP BY ALL""",
        "time_to_dlq": f"""
            WITH d AS (SELECT cluster_id, subscription, cluster_name,
                              floor(epoch(last_failure_at))::BIGINT
                              - floor(epoch(first_failure_at))::BIGINT AS s
                       FROM {letters} WHERE first_failure_at IS NOT NULL AND last_failure_at IS NOT NULL),
            h AS (SELECT cluster_id, subscription, max(cluster_name) AS cluster_name, s, count(*) AS n
                  FROM d WHERE s >= 0 GROUP BY cluster_id, subscription, s),
            w AS (SELECT *, sum(n) OVER (PARTITION BY cluster_id, subscription ORDER BY s
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cumulative,
                            sum(n) OVER (PARTITION BY cluster_id, subscription) AS total FROM h)
            SELECT cluster_id, subscription, max(cluster_name) AS cluster_name, max(total) AS letters,
                   min(s) AS min_seconds,
                   min(s) FILTER (WHERE cumulative >= {rank.format(p=50)}) AS p50,
                   min(s) FILTER (WHERE cumulative >= {rank.format(p=90)}) AS p90,
                   min(s) FILTER (WHERE cumulative >= {rank.format(p=99)}) AS p99,
                   max(s) AS max_seconds
            FROM w GROUP BY cluster_id, subscription""",
        "reasons": f"""
            SELECT error_class, error_pattern, count(*) AS letters,
                   count(DISTINCT (cluster_id, subscription)) AS subscriptions,
                   min(collected_at) AS first_seen, max(collected_at) AS last_seen,
                   min(id) AS example_letter_id, arg_min(error_text, id) AS example_text,
                   arg_min(subscription, id) AS example_subscription
            FROM {with_reason} GROUP BY error_class, error_pattern""",
        # Keys seen twice first, then their letters: the plain GROUP BY with a list per
        # key runs out of memory on 10 M mostly-unique keys.
        "duplicates": f"""
            WITH keyed AS (
                SELECT 'origin_message_id' AS kind, 'origin_message_id' AS key_property, cluster_id,
                       cluster_name, subscription, origin_message_id AS key, id, collected_at
                FROM {letters} WHERE length(origin_message_id) > 0
                UNION ALL
                SELECT 'business_key', '{BUSINESS_KEY}', cluster_id, cluster_name, subscription,
                       properties['{BUSINESS_KEY}'], id, collected_at
                FROM {letters} WHERE length(properties['{BUSINESS_KEY}']) > 0),
            repeated AS (SELECT kind, cluster_id, subscription, key FROM keyed
                         GROUP BY ALL HAVING count(*) > 1)
            SELECT kind, any_value(key_property) AS key_property, cluster_id,
                   max(cluster_name) AS cluster_name,
                   subscription, key, count(*) AS copies, list_sort(list(id))[1:100] AS letter_ids,
                   min(collected_at) AS first_seen, max(collected_at) AS last_seen
            FROM keyed SEMI JOIN repeated USING (kind, cluster_id, subscription, key)
            GROUP BY kind, cluster_id, subscription, key""",
        "replay_candidates": f"""
            SELECT id, cluster_id, subscription FROM {with_reason}
            WHERE state IN ({states})
              AND (regexp_matches(error_class, '(?i){policy.reason_matches}')
                   OR regexp_matches(error_text, '(?i){policy.reason_matches}'))
            ORDER BY id LIMIT {policy.limit}""",
    }


def _canonical(table: pa.Table) -> list[tuple]:
    """Rows as sorted tuples in column-name order; floats rounded past noise, times as epoch µs."""

    def value(v):
        if isinstance(v, float):
            return round(v, 9)
        if isinstance(v, datetime):
            return int(v.timestamp() * 1_000_000)
        if isinstance(v, list):
            return tuple(v)
        return v

    names = sorted(table.column_names)
    rows = table.select(names).to_pylist()
    return sorted(
        (tuple(value(row[name]) for name in names) for row in rows),
        key=lambda row: json.dumps(row, default=str),
    )


def _jvm_peak_mb(spark) -> float:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=str(ROOT / "var" / "bench" / "pipeline_nightly"))
    parser.add_argument("--driver-memory", default="1500m")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    args = parser.parse_args()
    work = Path(args.dir)
    export, output = work / "export", work / "results"

    generated_in = generate(export, args.n, args.seed)
    size_mb = sum(f.stat().st_size for f in (export / "dead_letters").rglob("*.parquet")) / 2**20
    print(
        f"export: {args.n} letters, {size_mb:.0f} MB of Parquet"
        + (f", generated in {generated_in:.1f} s" if generated_in else " (reused)"),
        flush=True,
    )

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = io.spark_session(
        app_name="redrive-bench",
        master="local[2]",
        conf={
            "spark.driver.memory": args.driver_memory,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    letters = io.read_archive(spark, str(export))
    jobs = nightly_jobs(business_key=BUSINESS_KEY, policy=ReplayPolicy.from_dict(POLICY))
    shutil.rmtree(output, ignore_errors=True)
    spark_seconds: dict[str, float] = {}
    for name, transform in jobs.items():
        started = time.perf_counter()
        io.write_result(transform(letters), str(output), name)
        spark_seconds[name] = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "name": f"pipeline_nightly.spark.{name}",
                    "n": args.n,
                    "seconds": round(spark_seconds[name], 2),
                    "rate": round(args.n / spark_seconds[name]),
                    "jvm_peak_mb": round(_jvm_peak_mb(spark)),
                }
            ),
            flush=True,
        )
    jvm_peak = _jvm_peak_mb(spark)
    spark.stop()

    connection = duckdb.connect()
    connection.execute("SET threads = 2; SET memory_limit = '2GB'; SET TimeZone = 'UTC'")
    files = str(export / "dead_letters" / "**" / "*.parquet")
    reference_seconds: dict[str, float] = {}
    mismatches = []
    for name, sql in reference_queries(files).items():
        started = time.perf_counter()
        expected = connection.sql(sql).fetch_arrow_table()
        reference_seconds[name] = time.perf_counter() - started
        got = pq.read_table(str(output / name))
        equal = _canonical(got) == _canonical(expected.select(got.column_names))
        if not equal:
            mismatches.append(name)
        print(
            json.dumps(
                {
                    "name": f"pipeline_nightly.duckdb.{name}",
                    "n": args.n,
                    "seconds": round(reference_seconds[name], 2),
                    "rate": round(args.n / reference_seconds[name]),
                    "rows": got.num_rows,
                    "equal": equal,
                }
            ),
            flush=True,
        )

    total, baseline_total = sum(spark_seconds.values()), sum(reference_seconds.values())
    rate, baseline_rate = args.n / total, args.n / baseline_total
    print(
        json.dumps(
            {
                "name": "pipeline_nightly",
                "n": args.n,
                "rate": round(rate),
                "baseline_rate": round(baseline_rate),
                "ratio": round(rate / baseline_rate, 3),
                "spark_seconds": round(total, 1),
                "duckdb_seconds": round(baseline_total, 1),
                "jvm_peak_mb": round(jvm_peak),
                "python_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "results_equal": not mismatches,
                "mismatches": mismatches,
                "under_2_minutes": total < 120 and not math.isnan(total),
            }
        )
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
