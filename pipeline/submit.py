"""Start the nightly jobs as a spark-submit process: the console's way to run them.

A separate process keeps the JVM out of the web and worker processes, and is
exactly what an operator types for a cluster, so local and cluster runs take one path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyspark

from pipeline.run import RESULT_MARKER

PIPELINE_DIR = Path(__file__).resolve().parent
RUNNER = PIPELINE_DIR / "run.py"


class PipelineFailed(Exception):
    """spark-submit ended without a result; `output` is the tail of what it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class SubmitOptions:
    master: str = "local[*]"
    driver_memory: str = "1g"
    executor_memory: str = "1g"
    # Cores of a cluster the run may take; None lets the master decide.
    total_executor_cores: int | None = None
    business_key: str = ""
    replay_policy: dict | None = None
    jobs: tuple[str, ...] = ()
    shuffle_partitions: int = 8


def spark_home() -> Path:
    """The Spark distribution inside the PySpark wheel (bin/spark-submit, jars/)."""
    return Path(pyspark.__file__).resolve().parent


def package_pipeline(dest_dir: Path) -> Path:
    """Zip the `pipeline` package for --py-files, so executors on other hosts import it."""
    archive = Path(dest_dir) / "redrive_pipeline.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(PIPELINE_DIR.rglob("*.py")):
            zipped.write(path, Path("pipeline") / path.relative_to(PIPELINE_DIR))
    return archive


def submit_command(*, input_path: str, output_path: str, options: SubmitOptions, py_files: Path) -> list[str]:
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        options.master,
        "--name",
        "redrive-nightly",
        "--driver-memory",
        options.driver_memory,
        "--executor-memory",
        options.executor_memory,
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--py-files",
        str(py_files),
    ]
    if options.total_executor_cores:
        command += ["--total-executor-cores", str(options.total_executor_cores)]
    command += [
        str(RUNNER),
        "--input",
        input_path,
        "--output",
        output_path,
        "--replay-policy",
        json.dumps(options.replay_policy or {}),
        "--shuffle-partitions",
        str(options.shuffle_partitions),
    ]
    if options.business_key:
        command += ["--business-key", options.business_key]
    if options.jobs:
        command += ["--jobs", ",".join(options.jobs)]
    return command


def submit_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Driver and executors run this interpreter (the one with pyspark and pyarrow).
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env["SPARK_HOME"] = str(spark_home())
    env.update(extra or {})
    return env


def submit(
    *,
    input_path: str,
    output_path: str,
    options: SubmitOptions,
    work_dir: Path,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """Run spark-submit to the end; return the runner's summary or raise PipelineFailed."""
    command = submit_command(
        input_path=input_path, output_path=output_path, options=options, py_files=package_pipeline(work_dir)
    )
    try:
        finished = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=submit_environment(env), check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PipelineFailed(f"spark-submit did not finish within {timeout} s") from exc
    output = (finished.stdout or "") + (finished.stderr or "")
    for line in reversed((finished.stdout or "").splitlines()):
        if line.startswith(RESULT_MARKER) and finished.returncode == 0:
            return json.loads(line[len(RESULT_MARKER) :])
    raise PipelineFailed(f"spark-submit exited with status {finished.returncode}", output[-4000:])
