"""`spacy-elmo demo` (what `make demo` runs) works end to end."""

import re

from typer.testing import CliRunner

from spacy_elmo.cli import app


def test_demo_prints_layers_and_speeds():
    result = CliRunner().invoke(app, ["demo", "--threads", "1"])
    assert result.exit_code == 0, result.output
    rows = re.findall(r"^\s+(\d)\s+(-?\d\.\d{3})\s+(-?\d\.\d{3})\s+(-?\d\.\d{3})$", result.output, re.M)
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert rows[0][1:] == ("1.000", "1.000", "1.000")  # layer 0 is context-independent
    assert any(float(v) < 0.999 for v in rows[1][1:])  # upper layers depend on context
    assert re.search(r"biLM: [\d,]+ tokens/s \(batch 32 x 20 tokens, 1 thread, ", result.output)  # not "1 threads"
    assert re.search(r"spaCy pipeline \(sentencizer \+ elmo\): [\d,]+ words/s", result.output)
