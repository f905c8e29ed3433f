from __future__ import annotations

from pipeline.jobs import duplicates


def test_origin_ids_dead_lettered_twice_are_reported_with_their_letter_ids(letters):
    df = letters(
        [
            {"id": 10, "origin_message_id": "o-1"},
            {"id": 11, "origin_message_id": "o-2"},
            {"id": 12, "origin_message_id": "o-1"},
            {"id": 13, "origin_message_id": "o-1"},
            # Same origin in another subscription: another consumer's failure, not a duplicate.
            {"id": 14, "origin_message_id": "o-2", "subscription": "billing-sub"},
            {"id": 15, "origin_message_id": ""},
            {"id": 16, "origin_message_id": ""},
        ]
    )

    rows = [r.asDict() for r in duplicates.transform(df).collect()]

    assert [(r["kind"], r["subscription"], r["key"], r["copies"], r["letter_ids"]) for r in rows] == [
        ("origin_message_id", "orders-sub", "o-1", 3, [10, 12, 13])
    ]


def test_business_key_duplicates_only_when_a_key_property_is_configured(letters):
    df = letters(
        [
            {"origin_message_id": "a", "properties": {"order_id": "A-1"}},
            {"origin_message_id": "b", "properties": {"order_id": "A-1"}},
            {"origin_message_id": "c", "properties": {"order_id": "A-2"}},
            {"origin_message_id": "d", "properties": {}},
            {"origin_message_id": "e", "properties": {"order_id": ""}},
        ]
    )

    assert duplicates.transform(df).count() == 0
    rows = [r.asDict() for r in duplicates.transform(df, business_key="order_id").collect()]

    assert [(r["kind"], r["key_property"], r["key"], r["copies"], r["letter_ids"]) for r in rows] == [
        ("business_key", "order_id", "A-1", 2, [1, 2])
    ]
