"""benchmarks/pretrain.py times the step as pretrain prepares it: the host preparation alone, and with
--prefetch both each backend with its inputs prepared ahead and not, on the same draws and dropout masks."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import pretrain as pb  # noqa: E402


def test_pretrain_benchmark_reports_host_preparation_and_prefetch_both(tmp_path):
    out = tmp_path / "pretrain.json"
    threads = torch.get_num_threads()
    try:
        assert pb.main(["--presets", "small", "--batch-size", "2", "--unroll", "3", "--negatives", "64", "--vocab-size", "300",
                        "--warmup", "1", "--repeats", "2", "--threads", "1", "--peak-gflops", "1", "--prefetch", "both",
                        "--no-keep-freed-memory", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    row, = json.loads(out.read_text())["rows"]
    assert row["host_prepare_ms"] > 0
    assert row["prefetch"] is False  # pretrain's default on the CPU
    other = row["other_prefetch"]
    assert other["prefetch"] is True and set(other["backends"]) == set(row["backends"])
    # the same draws, masks and updates: prefetching changes no loss, at any step
    assert other["loss_max_abs_diff"] == 0.0
    for name, measured in other["backends"].items():
        assert len(measured["step_s_all"]) == 2 and measured["first_loss"] == row["backends"][name]["first_loss"]
        assert len(measured["losses"]) == 3 and measured["losses"] == row["backends"][name]["losses"]
        assert len(set(measured["losses"])) == 3  # they train: each step's loss its own
        assert other["loss_diff"][name]["first_step_above"] is None
