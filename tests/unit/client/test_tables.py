"""How the ``taskforge`` command lays out answers for people (taskforge_client.tables)."""

from __future__ import annotations

from taskforge_client.tables import MAX_CELL, cell, fields, table


def test_cells_read_as_people_expect():
    assert cell(None) == "-"
    assert (cell(True), cell(False)) == ("yes", "no")
    assert cell("2026-12-01T23:21:05.343211Z") == "2026-12-01 23:21:05"
    assert cell("line one\nline two") == "line one line two"
    long = cell("x" * 500)
    assert len(long) == MAX_CELL and long.endswith("…")
    assert cell(0) == "0"


def test_a_table_pads_each_column_to_its_widest_cell():
    assert table(("NAME", "N"), [("a", 1), ("longer", 22)]).splitlines() == [
        "NAME    N",
        "a       1",
        "longer  22",
    ]
    assert table(("NAME",), []) == "(none)"


def test_fields_align_their_names():
    assert fields({"id": "t1", "status": None}).splitlines() == ["id      t1", "status  -"]
