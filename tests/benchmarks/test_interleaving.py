"""The interleaved benchmarks rotate their order each round (benchmarks.kernels.round_order), and
benchmarks/pretrain.py records every step's loss and how the steppers that must agree differ.

On an H200 (session 39) a fixed order timed the same stepper apart: the fused one with prefetching,
always third and always after the reference without, took 38-39 ms a step against 23.5 ms; a probe that
let each come first found them about equal. No timing is checked here: the order and the records."""

import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import kernels as kb  # noqa: E402
from benchmarks import pretrain as pb  # noqa: E402
from spacy_elmo.ops import fused_available  # noqa: E402

TINY = ["--presets", "small", "--batch-size", "2", "--unroll", "3", "--negatives", "64", "--vocab-size", "300",
        "--threads", "1", "--peak-gflops", "1", "--no-keep-freed-memory"]


@pytest.mark.parametrize("n", range(1, 8))
def test_round_order_balances_who_comes_first_and_who_follows_whom(n):
    items = [f"s{k}" for k in range(n)]
    period = kb.order_period(n)
    rows = [kb.round_order(items, i) for i in range(period)]
    assert all(sorted(row) == items for row in rows)  # each round runs every item once
    assert [kb.round_order(items, i)[0] for i in range(n)] == items  # round i starts with item i
    firsts = Counter(row[0] for row in rows)
    assert set(firsts) == set(items) and len(set(firsts.values())) == 1
    follows = Counter((a, b) for row in rows for a, b in zip(row, row[1:]))
    if n > 1:
        # every ordered pair, each equally often: no item always right after the same one
        assert set(follows) == {(a, b) for a in items for b in items if a != b}
        assert len(set(follows.values())) == 1
    # any `period` consecutive rounds are the same rows (a run's timed rounds start after its warm-up)
    assert sorted(kb.round_order(items, i) for i in range(5, 5 + period)) == sorted(rows)


def test_an_odd_count_runs_its_first_rows_reversed_next_not_item_i_mod_n_first():
    """docs/benchmarks.md said round i starts with item i mod n; for an odd n, rounds n to 2n - 1 are the first n
    rows reversed (its example: with 3, rounds 3, 4, 5 start with items 2, 0, 1)."""
    items = list("abc")
    assert [kb.round_order(items, i) for i in range(3, 6)] == [kb.round_order(items, i)[::-1] for i in range(3)]
    assert [kb.round_order(items, i)[0] for i in range(3, 6)] == list("cab")


def test_time_side_by_side_runs_each_round_in_round_order():
    calls = []
    impls = {name: (lambda name=name: calls.append(name)) for name in "abcd"}
    kb.time_side_by_side(impls, 8, 0, torch.device("cpu"))
    rounds = [calls[k:k + 4] for k in range(0, len(calls), 4)]
    assert rounds == [kb.round_order(list("abcd"), i) for i in range(8)]
    assert Counter(r[0] for r in rounds) == {name: 2 for name in "abcd"}


def test_timeit_waits_for_and_times_the_gpu_it_is_given(monkeypatch):
    """``timeit`` (every benchmark's, benchmarks/pipeline.py's and scripts/profile_pretrain_step.py's) recorded its
    CUDA events on ``torch.cuda.current_stream()`` and waited on ``torch.cuda.synchronize()``: the current GPU's.
    With ``--device cuda:1`` (current GPU 0) the events bracketed none of GPU 1's work. torch.cuda stood in for: the
    events go on the stream of the device given, and the waits are for it. pretrain.py waits through the same
    ``sync``."""
    seen = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self, stream=None):
            seen.append(("record", stream))

        def elapsed_time(self, end):
            return 5.0  # ms

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append(("sync", device)))
    other = torch.device("cuda", 1)
    median, times = kb.timeit(lambda: seen.append("fn"), 2, 1, other)
    assert (median, times) == (5e-3, [5e-3, 5e-3])
    timed = [("record", ("stream", other)), "fn", ("record", ("stream", other)), ("sync", other)]
    assert seen == ["fn", ("sync", other)] + timed * 2
    assert pb.sync is kb.sync


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU (one that is not the current one)")
def test_timeit_times_the_work_of_a_gpu_that_is_not_the_current_one():
    """30 ms or so of sleep on GPU 1 while GPU 0 is current times as about that (review devrev)."""
    torch.cuda.set_device(0)
    other = torch.device("cuda", 1)

    def sleep_on_other():
        with torch.cuda.device(other):
            torch.cuda._sleep(50_000_000)

    sleep_on_other()
    torch.cuda.synchronize(other)
    start = time.perf_counter()
    sleep_on_other()
    torch.cuda.synchronize(other)
    truth = time.perf_counter() - start
    assert truth > 5e-3  # a real GPU wait, well above a launch
    median, _ = kb.timeit(sleep_on_other, 3, 1, other)
    assert median > 0.5 * truth, (median, truth)


def test_step_counts_give_cuda_a_longer_warm_up_and_whole_periods():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert pb.step_counts(None, None, cpu, 4) == (1, 3)  # the CPU runs stay short
    assert pb.step_counts(None, None, cuda, 4) == (16, 20)  # 64 steps of the process before timing
    assert pb.step_counts(None, None, cuda, 6) == (11, 24)  # 24: a whole number of 6-round periods
    assert pb.step_counts(None, None, cuda, 3) == (22, 24)  # an odd count's period is 6
    assert pb.step_counts(2, 5, cuda, 4) == (2, 5)  # as given


def test_loss_diff_reports_step_zero_the_first_timed_step_and_where_they_part():
    a = [10.0, 9.5, 9.0, 8.5, 8.0]
    b = [10.0, 9.5 + 1e-4, 9.0 + 2e-3, 8.5 - 0.5, 8.0]
    d = pb.loss_diff(a, b, warmup=1)
    assert d["step0"] == 0.0 and d["first_timed"] == pytest.approx(1e-4)
    assert d["first_step_above"] == 2 and d["max_abs"] == pytest.approx(0.5)
    assert pb.loss_diff(a, a, warmup=3)["first_step_above"] is None


def test_loss_diff_counts_a_nan_or_infinite_loss_as_a_difference_above_tolerance():
    """A stepper whose loss turned NaN agreed with one that trained on: abs(nan) > tol is False, and max over
    the differences dropped the NaN when it came after a number."""
    a, b = [5.0, 4.0, 3.0, 2.9], [5.0, 4.0, float("nan"), float("nan")]
    for x, y in ((a, b), (b, a)):
        d = pb.loss_diff(x, y, warmup=1)
        assert d["first_step_above"] == 2 and d["max_abs"] == float("inf") and d["first_timed"] == 0.0
    d = pb.loss_diff([5.0, float("nan")], [5.0, 4.0], warmup=1)
    assert d["first_step_above"] == 1 and d["first_timed"] == d["max_abs"] == float("inf")
    d = pb.loss_diff([float("inf"), 1.0], [float("inf"), 1.0], warmup=1)  # inf - inf is NaN: not agreement either
    assert d["step0"] == float("inf") and d["first_step_above"] == 0


def _fake_steppers(monkeypatch, loss_of):
    """make_step replaced: stepper j (in creation order, the keys' order) records (j, step) and returns
    ``loss_of(j, step)``; no training runs."""
    calls = []
    made = []

    def fake_make_step(lm, optimizer, sampler, char_table, vocab, device, use_amp, gen, data, prefetch=False):
        j = len(made)
        made.append(prefetch)
        return pb.Stepper(lambda i: (calls.append((j, i)), loss_of(j, i))[1], lambda: None)

    monkeypatch.setattr(pb, "make_step", fake_make_step)
    return calls


def _run_pretrain(argv):
    """benchmarks/pretrain.py's main on ``argv``, which must succeed; this process's thread count kept."""
    threads = torch.get_num_threads()
    try:
        assert pb.main(argv) == 0
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(not fused_available(), reason="the fused backend needs the compiled extension")
def test_pretrain_rotates_the_steppers_and_records_every_loss(monkeypatch, tmp_path):
    """Four steppers (two backends, prefetch off and on): round i starts with stepper i mod 4 and
    no stepper always runs right after the same one (the old fixed order did both). Each stepper's
    every loss is in the JSON, and the on/off difference is located: here fused's prefetching stepper
    (index 3: reference off, on, fused off, on) parts from step 2."""
    calls = _fake_steppers(monkeypatch, lambda j, i: 5.0 - i + (0.25 if j == 3 and i >= 2 else 0.0))
    out = tmp_path / "p.json"
    _run_pretrain(TINY + ["--prefetch", "both", "--warmup", "1", "--repeats", "7", "--out", str(out)])
    rounds = [[j for j, _ in calls[k:k + 4]] for k in range(0, len(calls), 4)]
    assert all({i for _, i in calls[4 * r:4 * r + 4]} == {r} for r in range(8))  # step r in round r
    assert rounds == [kb.round_order(list(range(4)), r) for r in range(8)]
    assert [r[0] for r in rounds[:4]] == [0, 1, 2, 3]
    row, = json.loads(out.read_text())["rows"]
    assert row["steppers"] == [["reference", False, 0], ["reference", True, 0], ["fused", False, 0],
                               ["fused", True, 0]]
    assert row["warmup"] == 1 and row["repeats"] == 7
    assert row["backends"]["fused"]["losses"] == [5.0 - i for i in range(8)]
    assert len(row["backends"]["fused"]["step_s_all"]) == 7
    other = row["other_prefetch"]
    assert other["backends"]["fused"]["losses"][1:3] == [4.0, 3.25]
    assert other["loss_diff"]["reference"] == {"max_abs": 0.0, "step0": 0.0, "first_timed": 0.0,
                                               "first_step_above": None}
    assert other["loss_diff"]["fused"]["first_step_above"] == 2 and other["loss_max_abs_diff"] == 0.25


@pytest.mark.skipif(not fused_available(), reason="the fused backend needs the compiled extension")
def test_pretrain_times_one_backend_alone_with_a_twin(monkeypatch, tmp_path, capsys):
    """--backends fused: no reference stepper and no ratio to it (the report printed it unconditionally);
    --twin: a second copy of the main stepper, compared with the first."""
    calls = _fake_steppers(monkeypatch, lambda j, i: 3.0 + (1e-2 * i if j == 1 else 0.0))
    out = tmp_path / "p.json"
    _run_pretrain(TINY + ["--backends", "fused", "--twin", "--repeats", "2", "--out", str(out)])
    assert len(calls) == 2 * 3
    row, = json.loads(out.read_text())["rows"]
    assert set(row["backends"]) == {"fused"} and "other_prefetch" not in row
    assert "speedup_fused_vs_reference" not in row and "floor_vs_reference" not in row
    assert row["steppers"] == [["fused", False, 0], ["fused", False, 1]]
    twin = row["twin"]
    assert twin["prefetch"] is False and twin["backends"]["fused"]["losses"] == pytest.approx([3.0, 3.01, 3.02])
    assert twin["loss_diff"]["fused"]["first_step_above"] == 1
    assert "twin, prefetch off" in capsys.readouterr().out


def test_pretrain_writes_a_diverged_loss_as_standard_json(monkeypatch, tmp_path, capsys):
    """A stepper whose loss turned NaN: the JSON held NaN and Infinity (json's default), which strict readers refuse.
    Now the strings "nan" / "inf", the numbers in memory (and the printed report) as they were."""
    _fake_steppers(monkeypatch, lambda j, i: math.nan if j == 1 and i >= 2 else 5.0 - i)  # reference, prefetch on
    out = tmp_path / "p.json"
    _run_pretrain(TINY + ["--backends", "reference", "--prefetch", "both", "--repeats", "3", "--out", str(out)])

    def refuse(token):
        raise ValueError(f"not standard JSON: {token}")

    record = json.loads(out.read_text(encoding="utf-8"), parse_constant=refuse)
    row, = record["rows"]
    other = row["other_prefetch"]
    assert other["backends"]["reference"]["losses"] == [5.0, 4.0, "nan", "nan"]
    assert row["backends"]["reference"]["losses"] == [5.0, 4.0, 3.0, 2.0] and row["backends"]["reference"]["first_loss"] == 5.0
    assert other["loss_max_abs_diff"] == "inf"
    assert other["loss_diff"]["reference"] == {"max_abs": "inf", "step0": 0.0, "first_timed": 0.0, "first_step_above": 2}
    assert '"nan"' in record["note"] and record["complete"] is True
    assert "reference inf at most" in capsys.readouterr().out


def test_pretrain_writes_a_loss_nan_from_the_first_step_as_standard_json(monkeypatch, tmp_path):
    """A stepper whose loss is NaN from step 0: its ``first_loss`` is NaN too, and the JSON holds it as "nan" (the
    test above diverges from step 2 only, so its first losses are numbers)."""
    _fake_steppers(monkeypatch, lambda j, i: math.nan if j == 1 else 5.0 - i)  # reference, prefetch on
    out = tmp_path / "p.json"
    _run_pretrain(TINY + ["--backends", "reference", "--prefetch", "both", "--repeats", "2", "--out", str(out)])

    def refuse(token):
        raise ValueError(f"not standard JSON: {token}")

    row, = json.loads(out.read_text(encoding="utf-8"), parse_constant=refuse)["rows"]
    other = row["other_prefetch"]
    assert other["backends"]["reference"]["first_loss"] == "nan"
    assert other["backends"]["reference"]["losses"] == ["nan"] * 3
    assert row["backends"]["reference"]["first_loss"] == 5.0
    assert other["loss_diff"]["reference"]["step0"] == "inf" and other["loss_diff"]["reference"]["first_step_above"] == 0


def test_pretrain_refuses_a_bad_backend_and_no_timed_round():
    with pytest.raises(SystemExit):
        pb.build_parser().parse_args(["--backends", "cudnn"])
    assert pb.main(TINY + ["--backends", "reference", "--repeats", "0"]) == 1


@pytest.mark.skipif(not fused_available(), reason="the fused backend needs the compiled extension")
def test_pretrain_row_numbers_against_hand_counts(monkeypatch, tmp_path):
    """Each stepper's step takes a fixed time on a fake clock (reference 2 s, fused 0.5 s): the row's tokens a step
    are B x U (2 x 3 = 6, the targets' extra position not counted), the distinct tokens those of both directions'
    input windows, and tokens/s, the fused/reference ratio, the floor and each backend's fraction of it follow
    from them by hand. The record holds the options it ran with."""
    from types import SimpleNamespace

    seconds = [2.0, 0.5]  # stepper j: reference, fused
    clock = [0.0]

    def step_loss(j, i):
        clock[0] += seconds[j]
        return 5.0 - i

    _fake_steppers(monkeypatch, step_loss)
    monkeypatch.setattr(pb, "time", SimpleNamespace(perf_counter=lambda: clock[0], strftime=lambda *a: "now"))
    monkeypatch.setattr(pb, "bench_logsumexp", lambda args, device: {
        "rows": 6, "negatives": 64, "torch.logsumexp": 1.0, "ConsumingLogSumExp": 0.5, "speedup": 2.0})
    out = tmp_path / "p.json"
    _run_pretrain(TINY + ["--backends", "reference", "fused", "--warmup", "1", "--repeats", "3", "--out", str(out)])
    record = json.loads(out.read_text())
    row, = record["rows"]
    assert row["steppers"] == [["reference", False, 0], ["fused", False, 0]]
    fused, ref = row["backends"]["fused"], row["backends"]["reference"]
    assert fused["step_s_all"] == [0.5] * 3 and ref["step_s_all"] == [2.0] * 3
    assert fused["tokens_per_s"] == pytest.approx(6 / 0.5) and ref["tokens_per_s"] == pytest.approx(6 / 2.0)
    assert row["speedup_fused_vs_reference"] == pytest.approx(4.0)
    # the distinct input tokens of the timed windows, both directions (the last position is only a target)
    data = pb.batches(pb.synthetic_vocab(300), 2, 3, 4)[1:]
    unique = [torch.unique(torch.cat([f[:, :-1], b[:, :-1]], 1)).numel() for f, b in data]
    assert unique != [torch.unique(f[:, :-1]).numel() for f, _ in data]  # the backward window adds tokens
    assert row["unique_tokens_mean"] == pytest.approx(sum(unique) / 3)
    flops = sum(pb.step_flops(pb.BiLMConfig.preset("small"), u, 6, 64) for u in unique) / 3
    assert row["gflop_per_step"] == pytest.approx(flops / 1e9)
    floor = 6 / (flops / 1e9)  # tokens/s at the peak (--peak-gflops 1)
    assert row["floor_tokens_per_s"] == pytest.approx(floor)
    assert row["floor_vs_reference"] == pytest.approx(floor / 3.0)
    for measured, s in ((fused, 0.5), (ref, 2.0)):
        assert measured["gflops"] == pytest.approx(flops / s / 1e9)
        assert measured["floor_fraction"] == pytest.approx(6 / s / floor) == pytest.approx(flops / s / 1e9)
    args = record["args"]
    assert (args["batch_size"], args["unroll"], args["negatives"], args["warmup"], args["repeats"]) == (2, 3, 64, 1, 3)
    assert args["backends"] == ["reference", "fused"] and args["out"] == str(out)
