from __future__ import annotations

import uuid

from pyspark.sql import functions as F

from pipeline.jobs import reasons


def _normalised(spark, text: str) -> str:
    return spark.createDataFrame([(text,)], "t string").select(reasons.normalise(F.col("t"))).first()[0]


def test_normalise_masks_numbers_ids_and_quotes(spark):
    cases = {
        "order 1234 not found": "order <n> not found",
        "timeout after 30.5s on 10.0.0.7:6650": "timeout after <n>s on <n>.<n>:<n>",
        f"message {uuid.uuid4()} rejected": "message <id> rejected",
        "key 'customer-42' is locked by \"worker 7\"": "key '?' is locked by '?'",
        "ledger 0x7f3a9c lost, entry 5f2a9c1e77b0": "ledger <id> lost, entry <id>",
        "user42 hit quota  for ord_8f3Kz19": "<id> hit quota for <id>",
    }
    assert {text: _normalised(spark, text) for text in cases} == cases


def test_reasons_groups_variants_of_one_error_into_one_line_with_an_example(letters):
    rows = [
        {"properties": {"exception_class": "OrderNotFound", "error_message": f"order {n} not found"}}
        for n in (7, 1234, 99999)
    ]
    rows += [
        {"properties": {"error": "TimeoutException: no reply within 30000 ms"}},
        {"properties": {"error": "TimeoutException: no reply within 5000 ms"}, "subscription": "billing"},
        {"properties": {"error": "TimeoutException"}},
        {"properties": {"error_message": "disk full"}},
        {"properties": {}},
    ]
    df = letters(rows)

    result = [r.asDict() for r in reasons.transform(df).collect()]

    by_key = {(r["error_class"], r["error_pattern"]): r for r in result}
    assert {k: r["letters"] for k, r in by_key.items()} == {
        ("OrderNotFound", "order <n> not found"): 3,
        ("TimeoutException", "TimeoutException: no reply within <n> ms"): 2,
        ("TimeoutException", "TimeoutException"): 1,
        ("(unknown)", "disk full"): 1,
        ("(unknown)", ""): 1,
    }
    # Most letters first; the example is the lowest id with its raw text.
    assert (result[0]["error_class"], result[0]["example_letter_id"], result[0]["example_text"]) == (
        "OrderNotFound",
        1,
        "order 7 not found",
    )
    timeout = by_key[("TimeoutException", "TimeoutException: no reply within <n> ms")]
    assert (timeout["subscriptions"], timeout["example_letter_id"]) == (2, 4)


def test_reason_class_prefers_the_class_property_over_the_text(letters):
    df = letters(
        [{"properties": {"exception": "java.net.SocketTimeoutException", "error": "IOError: read timed out"}}]
    )

    (row,) = reasons.transform(df).collect()

    assert (row.error_class, row.error_pattern) == (
        "java.net.SocketTimeoutException",
        "IOError: read timed out",
    )
