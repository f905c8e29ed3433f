"""Redrive's Spark pipeline over Parquet exports of the dead-letter archive.

Plain Python and PySpark: nothing here imports Django. The console exports the
archive (console/analytics), then runs `pipeline/run.py` through spark-submit; the
jobs in `pipeline/jobs/` are pure DataFrame transforms, reading and writing live in
`pipeline/io.py`.
"""
