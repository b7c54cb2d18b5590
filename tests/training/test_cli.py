"""The pretrain / evaluate / export commands, end to end on a tiny model."""

import json

from typer.testing import CliRunner

from spacy_elmo import BiLM
from spacy_elmo.cli import app

from .conftest import TINY, write_corpus

runner = CliRunner()


def test_pretrain_evaluate_export(tmp_path):
    train = write_corpus(tmp_path / "train.txt", 200)
    held = write_corpus(tmp_path / "held.txt", 30, seed=2)
    options = tmp_path / "tiny.json"
    options.write_text(json.dumps(TINY))
    out = tmp_path / "model"
    args = ["pretrain", str(train), str(out), "--options", str(options), "--max-steps", "3", "--batch-size", "4",
            "--unroll", "5", "--negatives", "8", "--threads", "1", "--backend", "reference", "--no-progress",
            "--heldout", str(held)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "held-out perplexity" in result.output
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--options", str(options)])
    assert result.exit_code == 1 and "--resume" in result.output

    result = runner.invoke(app, ["evaluate", str(out), str(held), "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output.strip().splitlines()[-1])
    assert {"perplexity", "perplexity_forward", "perplexity_backward", "oov_rate"} <= set(metrics)

    for fmt in ("allennlp", "native"):
        dest = tmp_path / fmt
        result = runner.invoke(app, ["export", str(out), str(dest), "--format", fmt])
        assert result.exit_code == 0, result.output
        BiLM.load(dest)
        again = runner.invoke(app, ["evaluate", str(dest), str(held), "--json"])
        assert abs(json.loads(again.output.strip().splitlines()[-1])["perplexity"] - metrics["perplexity"]) < 1e-3

    result = runner.invoke(app, ["pretrain", str(tmp_path / "nope.txt"), str(tmp_path / "x"), "--options", str(options)])
    assert result.exit_code == 1 and "does not exist" in result.output
