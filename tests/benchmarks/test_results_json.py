"""The benchmarks' results JSON is standard JSON (benchmarks/results_json.py): Python's json wrote a diverged
loss as NaN and its difference as Infinity, tokens that jq and JavaScript's JSON.parse refuse."""

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import results_json as rj  # noqa: E402


def strict_loads(text: str):
    """json.loads refusing NaN / Infinity / -Infinity, as strict readers do (Python's reads them by default)."""
    def refuse(token):
        raise ValueError(f"not standard JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_strict_loads_refuses_what_python_writes_by_default():
    with pytest.raises(ValueError, match="Infinity"):
        strict_loads(json.dumps({"loss_max_abs_diff": math.inf}))


def test_nonfinite_values_at_the_named_keys_are_written_as_text_that_float_reads_back(tmp_path):
    rows = [{"losses": [5.0, math.nan, math.inf, -math.inf], "first_loss": math.nan, "tokens_per_s": 12.5,
             "loss_diff": {"fused": {"max_abs": math.inf, "step0": 0.0, "first_step_above": 2}}}]
    encoded = rj.nonfinite_as_text({"rows": rows, "note": "x"}, ("losses", "first_loss", "loss_diff"))
    assert math.isnan(rows[0]["losses"][1])  # the record itself is unchanged
    path = tmp_path / "r.json"
    rj.write_json(path, encoded)
    back = strict_loads(path.read_text(encoding="utf-8"))
    row, = back["rows"]
    assert row["losses"] == [5.0, "nan", "inf", "-inf"] and row["first_loss"] == "nan" and row["tokens_per_s"] == 12.5
    assert row["loss_diff"] == {"fused": {"max_abs": "inf", "step0": 0.0, "first_step_above": 2}}
    assert [float(x) for x in row["losses"][2:]] == [math.inf, -math.inf] and math.isnan(float(row["losses"][1]))
    assert set(rj.NONFINITE_TEXT) == {"nan", "inf", "-inf"}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_any_other_nonfinite_number_fails_in_the_writer_naming_its_place(tmp_path, value):
    path = tmp_path / "r.json"
    record = {"rows": [{"backends": {"fused": {"tokens_per_s": 1.0}}}, {"backends": {"fused": {"tokens_per_s": value}}}]}
    with pytest.raises(ValueError, match=r"^rows\[1\]\.backends\.fused\.tokens_per_s is not a finite number"):
        rj.write_json(path, record)
    assert not path.exists()  # nothing half-written
    with pytest.raises(ValueError, match="the value is not a finite number"):
        rj.dumps(value)
    with pytest.raises(ValueError, match=r"^\[0\]\[1\] is not"):
        rj.dumps([(1.0, value)])


def test_write_json_keeps_the_writers_indent_and_default(tmp_path):
    path = tmp_path / "k.json"
    rj.write_json(path, {"args": {"out": Path("/x")}, "rows": [1]}, indent=1, default=str)
    text = path.read_text(encoding="utf-8")
    assert text == '{\n "args": {\n  "out": "/x"\n },\n "rows": [\n  1\n ]\n}\n'
