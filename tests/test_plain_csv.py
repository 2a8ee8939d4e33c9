"""Plain data out: no CSV cell the project writes is a formula a spreadsheet would execute (OWASP CSV injection)."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from fl_strategies.files.plain_files import plain_cell, plain_frame
from server_app.results import csv_cell


@pytest.mark.parametrize("cell", ["=1+2", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1", "-", "+",
                                  "-inf", "=HYPERLINK(\"http://x\")", "-; -; -"])
def test_a_cell_a_spreadsheet_would_execute_gets_a_leading_quote(cell):
    assert plain_cell(cell) == "'" + cell
    assert csv_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-1.5e-3", "+2", "-0", ".5", "-7.", "1e10", "power", "'=already", "a=b", "",
                                  -2.0, 3, None, True])
def test_numbers_and_plain_strings_are_left_alone(cell):
    assert plain_cell(cell) == cell


def test_plain_frame_escapes_string_columns_only():
    frame = pd.DataFrame({"run": ["=evil", "ok", "-x"], "value": [-1.0, 2.0, 3.0], "name": ["-3", "+4e2", "@a"]})
    out = plain_frame(frame)
    assert list(out["run"]) == ["'=evil", "ok", "'-x"]
    assert list(out["value"]) == [-1.0, 2.0, 3.0]
    assert list(out["name"]) == ["-3", "+4e2", "'@a"]
    assert list(frame["run"]) == ["=evil", "ok", "-x"]  # the input is not changed


def test_compare_writes_run_names_as_text(tmp_path):
    from simulations.compare import main

    config = tmp_path / "c.toml"
    names = ["=1+1", "@SUM(A1)", "-cmd", "+x", "plain"]
    config.write_text("seeds = [0]\n[defaults]\nnum-clients = 2\nnum-samples = 100\ndimension = 6\nrank = 2\n"
                      "iteration-rank = 2\nnum-server-rounds = 1\n"
                      + "".join(f'[[runs]]\nname = "{n}"\nstrategy = "power"\n' for n in names))
    assert main([str(config), "--out", str(tmp_path / "o")]) == 0
    with open(tmp_path / "o" / "results.csv", newline="") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert not [c for c in cells if c[:1] in "=+-@\t\r" and plain_cell(c) != c]
    runs = set(pd.read_csv(tmp_path / "o" / "results.csv")["run"])
    assert runs == {"'=1+1", "'@SUM(A1)", "'-cmd", "'+x", "plain"}
