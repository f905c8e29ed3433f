"""Reading the export and writing job results: the only Spark I/O of the pipeline.

Paths are whatever Hadoop understands: a local directory, `file:///...`,
`hdfs://...`, `s3a://...` (with the matching connector on the cluster's classpath).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from pipeline.schema import COLUMNS, DATASET, spark_schema


def spark_session(
    *, app_name: str = "redrive-pipeline", master: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """The session every runner uses. `master` None keeps what spark-submit set."""
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    # Days are UTC days everywhere in Redrive, whatever the machine's zone.
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # Plain microsecond timestamps (not Spark's legacy INT96): the console reads
        # results with pyarrow.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def dataset_path(export_path: str) -> str:
    return export_path.rstrip("/") + "/" + DATASET


def read_archive(spark: SparkSession, export_path: str) -> DataFrame:
    """The exported dead letters, one row per archived letter, export columns only.

    The partition columns (`date`, `cluster`) are dropped: the jobs derive days from
    `collected_at` so they run the same on a DataFrame built in a test.
    """
    path = dataset_path(export_path)
    if not _exists(spark, path):
        # Nothing exported yet (an empty archive): the jobs run and find nothing.
        return spark.createDataFrame([], schema=spark_schema())
    return spark.read.option("basePath", path).parquet(path).select(*COLUMNS)


def _exists(spark: SparkSession, path: str) -> bool:
    """Ask Hadoop's file system for the path, so s3a:// and hdfs:// answer too."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(hadoop_path)


def write_result(result: DataFrame, output_path: str, name: str) -> str:
    """Write one job's result as a small Parquet dataset `<output>/<name>/`; return the path.

    Results are summaries (thousands of rows, not millions), so one file each is
    enough and keeps the console's load step simple.
    """
    path = output_path.rstrip("/") + "/" + name
    result.coalesce(1).write.mode("overwrite").parquet(path)
    return path
