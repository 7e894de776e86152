"""The benches' report tables: a table with no rows is its title and header (the cluster soak's
"Failed runs" table is empty when no run failed)."""

from __future__ import annotations

from bench.harness.stats import table


def test_a_table_without_rows_is_its_title_and_header() -> None:
    assert table("Failed runs", ["run", "kind"], []).splitlines() == [
        "Failed runs",
        "run  kind",
        "---  ----",
    ]


def test_columns_are_as_wide_as_their_widest_cell() -> None:
    lines = table("T", ["a", "b"], [["long", 1], ["x", 22]]).splitlines()
    assert lines[1:] == ["a     b ", "----  --", "long   1", "   x  22"]
