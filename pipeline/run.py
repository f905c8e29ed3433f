"""Run the nightly jobs over an archive export and write their results.

Usable three ways, all with the same arguments after the script:

    spark-submit --master spark://host:7077 --py-files pipeline.zip pipeline/run.py --input ... --output ...
    python -m pipeline.run --master local[*] --input ... --output ...
    manage.py analytics_run [--master ...]      (the console: export, this, load)

The last line printed is `REDRIVE_PIPELINE_RESULT {json}`: rows and seconds per job,
which the console records on the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

if __package__ in (None, ""):
    # Run as a file (spark-submit pipeline/run.py): make `pipeline` importable from
    # the project root when it was not shipped with --py-files.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark.sql import DataFrame  # noqa: E402

from pipeline import io  # noqa: E402
from pipeline.jobs import duplicates, overview, reasons, replay_candidates, retries  # noqa: E402

RESULT_MARKER = "REDRIVE_PIPELINE_RESULT "
DEFAULT_MASTER = "local[*]"


def nightly_jobs(
    *, business_key: str | None, policy: replay_candidates.ReplayPolicy
) -> dict[str, Callable[[DataFrame], DataFrame]]:
    """Result name -> transform, in the order they run."""
    return {
        "overview": overview.transform,
        "retry_histogram": retries.histogram,
        "time_to_dlq": retries.time_to_dlq,
        "reasons": reasons.transform,
        "duplicates": lambda letters: duplicates.transform(letters, business_key=business_key),
        "replay_candidates": lambda letters: replay_candidates.transform(letters, policy),
    }


JOB_NAMES = tuple(nightly_jobs(business_key=None, policy=replay_candidates.ReplayPolicy()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pipeline.run", description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="export path (the folder holding dead_letters/)")
    parser.add_argument("--output", required=True, help="where each job's result is written")
    parser.add_argument(
        "--master",
        default=None,
        help=f"Spark master URL (default {DEFAULT_MASTER}; spark-submit's own when run by it)",
    )
    parser.add_argument("--jobs", default=",".join(JOB_NAMES), help="comma-separated subset of jobs")
    parser.add_argument("--business-key", default="", help="property holding a business key, for duplicates")
    parser.add_argument("--replay-policy", default="{}", help="replay policy as JSON")
    parser.add_argument("--shuffle-partitions", type=int, default=8)
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.jobs.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(JOB_NAMES))
    if unknown:
        parser.error(f"unknown jobs: {', '.join(unknown)} (known: {', '.join(JOB_NAMES)})")
    args.jobs = wanted
    try:
        args.replay_policy = replay_candidates.ReplayPolicy.from_dict(json.loads(args.replay_policy))
    except (ValueError, TypeError) as exc:
        parser.error(f"bad --replay-policy: {exc}")
    return args


def run(args: argparse.Namespace) -> dict:
    """Run the chosen jobs; return {"input_rows", "jobs": {name: {"rows", "seconds", "path"}}}."""
    master = args.master
    if master is None and not os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Not under spark-submit, which would have set the master already.
        master = DEFAULT_MASTER
    spark = io.spark_session(
        master=master, conf={"spark.sql.shuffle.partitions": str(args.shuffle_partitions)}
    )
    letters = io.read_archive(spark, args.input)
    summary: dict = {"master": spark.sparkContext.master, "input_rows": letters.count(), "jobs": {}}
    jobs = nightly_jobs(business_key=args.business_key or None, policy=args.replay_policy)
    for name in args.jobs:
        started = time.perf_counter()
        path = io.write_result(jobs[name](letters), args.output, name)
        seconds = time.perf_counter() - started
        summary["jobs"][name] = {
            "rows": spark.read.parquet(path).count(),
            "seconds": round(seconds, 3),
            "path": path,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_args(argv))
    print(RESULT_MARKER + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
