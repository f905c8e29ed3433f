from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import io
from pipeline.jobs import overview
from pipeline.schema import COLUMNS, EXPORT_SCHEMA
from tests.pipeline.conftest import at


def test_reading_an_export_that_does_not_exist_yet_gives_no_letters(spark, tmp_path):
    letters = io.read_archive(spark, str(tmp_path / "nothing-exported"))

    assert letters.columns == list(COLUMNS) and letters.count() == 0
    assert overview.transform(letters).count() == 0


def test_read_archive_returns_export_columns_and_results_round_trip(spark, tmp_path):
    folder = tmp_path / "export" / "dead_letters" / "date=2026-11-20" / "cluster=4"
    folder.mkdir(parents=True)
    row = {name: None for name in COLUMNS}
    row.update(
        id=1,
        cluster_id=4,
        cluster_name="eu",
        subscription="s",
        source="t",
        properties=[("a", "b")],
        retry_count=2,
        collected_at=at("2026-11-20 10:00:00"),
        state="parked",
    )
    pq.write_table(pa.Table.from_pylist([row], schema=EXPORT_SCHEMA), folder / "part-b00000001.parquet")

    letters = io.read_archive(spark, str(tmp_path / "export"))
    path = io.write_result(overview.transform(letters), str(tmp_path / "out"), "overview")

    assert letters.columns == list(COLUMNS)  # partition columns left out
    (written,) = pq.read_table(path).to_pylist()
    assert (written["cluster_name"], written["day"].isoformat(), written["dead_letters"]) == (
        "eu",
        "2026-11-20",
        1,
    )
