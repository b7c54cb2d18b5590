"""The CUDA paths of the benchmarks, checked without a GPU: a run on a lent GPU machine
(30 minutes, 10 per command) must not die mid-way or write outside where it is told."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import kernels, pretrain  # noqa: E402
from spacy_elmo.ops import fused_available  # noqa: E402

def test_result_paths():
    assert kernels.result_paths(None, "kernels_cuda") == (kernels.RESULTS / "kernels_cuda.json",
                                                          kernels.RESULTS / "kernels_cuda.png")
    assert kernels.result_paths("mine", "x")[0] == kernels.RESULTS / "mine.json"
    assert kernels.result_paths("/tmp/o/k.json", "x") == (Path("/tmp/o/k.json"), Path("/tmp/o/k.png"))
    assert kernels.result_paths("/tmp/o/kernels_cuda", "x")[1] == Path("/tmp/o/kernels_cuda.png")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_cuda_device_without_gpu_is_refused_before_any_work(capsys):
    problem = kernels.device_problem(torch.device("cuda"))
    assert problem and ("GPU" in problem or "not built" in problem)
    assert kernels.main(["--device", "cuda", "--out", "/nonexistent/x"]) == 1
    assert pretrain.main(["--device", "cuda", "--out", "/nonexistent/x.json"]) == 1
    assert "GPU" in capsys.readouterr().err or not fused_available()


@pytest.mark.skipif(not fused_available(), reason="spacy_elmo._C is not built")
def test_cuda_device_with_a_cpu_only_extension_is_refused(monkeypatch):
    from spacy_elmo.ops import fused

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fused, "built_with_cuda", lambda: False)
    assert "without its CUDA kernels" in kernels.device_problem(torch.device("cuda"))
    assert kernels.device_problem(torch.device("cpu")) is None


@pytest.mark.skipif(not fused_available(), reason="spacy_elmo._C is not built")
def test_kernels_writes_to_a_path_out(tmp_path):
    stem = tmp_path / "sub" / "k"
    assert kernels.main(["--presets", "small", "--batches", "1", "--lengths", "3", "--repeats", "1", "--warmup", "0",
                         "--no-kernels", "--whole-model", "--peak-gflops", "1", "--max-slow-tokens", "0",
                         "--out", str(stem)]) == 0
    payload = json.loads((tmp_path / "sub" / "k.json").read_text())
    assert payload["complete"] is True and payload["rows"]
    assert not (kernels.RESULTS / "k.json").exists()
