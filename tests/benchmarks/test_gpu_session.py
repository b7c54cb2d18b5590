"""scripts/gpu_session.sh and the CUDA paths of the benchmarks, checked without a GPU.

The script runs once per lent GPU machine (30 minutes, 10 per command): an argument
its benchmarks reject, a result file outside $OUT or a silent CPU-only build would
waste that lease. Here the script runs with a stub Python that records each call."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import kernels, pretrain  # noqa: E402
from scripts import profile_pretrain_step  # noqa: E402
from spacy_elmo.ops import fused_available  # noqa: E402

SCRIPT = ROOT / "scripts" / "gpu_session.sh"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")

STUB = """#!/usr/bin/env bash
echo "ARCH=${TORCH_CUDA_ARCH_LIST:-} CUDA=${SPACY_ELMO_CUDA:-} :: $*" >>"$STUB_LOG"
case "$*" in *"fused.char_cnn(torch.ones"*) exit "${STUB_PROBE_RC:-0}";; esac
if [ "$1" = -c ]; then exit "${STUB_CHECK_RC:-0}"; fi
case "$*" in *"${STUB_SLEEP_ON:-@nothing@}"*) sleep "${STUB_SLEEP:-0}";; esac
exit 0
"""


def _run_script(tmp_path, *, device="cuda", quick="0", check_rc=0, **extra_env):
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, DEVICE=device, QUICK=quick, OUT=str(out), PY=str(stub), STUB_LOG=str(tmp_path / "calls"),
               STUB_CHECK_RC=str(check_rc), PATH=os.environ.get("PATH", "/usr/bin:/bin"), **extra_env)
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    res = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines()
    return res, out, calls


def _bench_calls(calls):
    """(script name, argv, env prefix) of every benchmarks/*.py call."""
    found = []
    for line in calls:
        env, _, cmd = line.partition(" :: ")
        argv = shlex.split(cmd)
        if argv and argv[0].startswith("benchmarks/"):
            found.append((argv[0], argv[1:], env))
    return found


@needs_bash
@pytest.mark.parametrize("quick", ["0", "1"])
def test_every_benchmark_call_parses_and_writes_into_out(tmp_path, quick):
    res, out, calls = _run_script(tmp_path, quick=quick)
    assert res.returncode == 0, res.stdout + res.stderr
    build = [c for c in calls if "setup.py" in c]
    assert build and all(c.startswith("ARCH=9.0 CUDA=1 ") for c in build), calls
    benches = _bench_calls(calls)
    assert [name for name, _, _ in benches] == ["benchmarks/kernels.py", "benchmarks/kernels.py",
                                                 "benchmarks/pretrain.py", "benchmarks/pretrain.py"]
    files = {"gpu_session.log"}
    for name, argv, _ in benches:
        module = kernels if name.endswith("kernels.py") else pretrain
        args = module.build_parser().parse_args(argv)  # SystemExit here: the script passes what argparse rejects
        assert args.device == "cuda"
        if module is kernels:
            json_path, png_path = kernels.result_paths(args.out, "unused")
            files |= {json_path.name, png_path.name}
        else:
            json_path = args.out
            files.add(json_path.name)
        assert json_path.parent == out, f"{name} writes outside $OUT: {json_path}"
    profiles = [shlex.split(c.partition(" :: ")[2])[1:] for c in calls if "scripts/profile_pretrain_step.py" in c]
    assert len(profiles) == 1
    profile_out = profile_pretrain_step.build_parser().parse_args(profiles[0]).out
    assert profile_out.parent == out, f"the profile writes outside $OUT: {profile_out}"
    files.add(profile_out.name)
    assert len(files) == 8  # what the device tool brings back (at most 8): none overwrites another
    log = (out / "gpu_session.log").read_text()
    assert "=== steps" in log and "FATAL" not in log


@needs_bash
def test_the_gpu_targets_come_first_and_the_run_fits_the_device_limits(tmp_path):
    """A lent GPU gives a session 15 minutes of device time, its start (minutes) included, and a
    command 600 s: the script stops itself within BUDGET (plus the 10 s `timeout -k` gives a killed
    step), and a step past the budget is skipped, so the order decides what a short run keeps. After
    the build: the CUDA tests (the kernels' and the whole model's; the CPU ones last), the whole original model in bf16 at
    256 x 20, the kernels in float32 (the fused biLSTM layer against cuDNN's nn.LSTM) at batch >= 32,
    then pretraining, original preset first, at batch 128 and at the released models' 384, and a profile of
    its step."""
    budget = int(re.search(r"BUDGET=\$\{BUDGET:-(\d+)\}; else", SCRIPT.read_text()).group(1))
    assert budget + 10 < 600
    res, out, calls = _run_script(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    argvs = [shlex.split(line.partition(" :: ")[2]) for line in calls if " :: " in line]
    run = [a for a in argvs if a[:1] != ["-c"]]  # not the checks in between (their code spans lines)
    assert run[0][:2] == ["setup.py", "-q"]
    assert run[1][:2] == ["-m", "pytest"] and run[1][-5:] == ["cuda", "tests/ops/test_fused_cuda.py",
                                                             "tests/bilm/test_stateful.py",
                                                             "tests/training/test_prefetch.py",
                                                             "tests/training/test_cuda_paths.py"]
    assert [run[2][0], run[3][0], run[4][0]] == ["benchmarks/kernels.py", "benchmarks/kernels.py",
                                                 "benchmarks/pretrain.py"]
    kp, pp = kernels.build_parser(), pretrain.build_parser()
    bf16, fp32, pre = kp.parse_args(run[2][1:]), kp.parse_args(run[3][1:]), pp.parse_args(run[4][1:])
    assert bf16.autocast == "bf16" and bf16.whole_model
    assert (bf16.presets[0], bf16.batches[0], bf16.lengths[0]) == ("original", 256, 20)
    assert fp32.autocast is None and not fp32.no_kernels and fp32.presets[0] == "original"
    assert fp32.batches[0] == 32 and min(fp32.batches) >= 32
    assert pre.presets[0] == "original" and pre.bf16 and pre.batch_size == 128
    assert pre.prefetch == "both"  # pretrain's GPU default (prepared one step ahead) and without, side by side
    assert pre.twin  # and a twin of each prefetching stepper: the GPU's own loss difference, to read on/off against
    big = pp.parse_args(run[5][1:])
    assert run[5][0] == "benchmarks/pretrain.py" and big.presets == ["original"] and big.batch_size == 384
    assert big.out != pre.out
    # CUDA's warm-up and repeats (pretrain.py's defaults there): the first ~60 steps of a process ran slow on an
    # H200, and 3 timed steps gave medians of a bimodal step time
    for args in (pre, big):
        steppers = len(pretrain.stepper_keys(["reference", "fused"], True, args.prefetch == "both", args.twin))
        warmup, repeats = pretrain.step_counts(args.warmup, args.repeats, torch.device("cuda"), steppers)
        assert warmup * steppers >= 64 and repeats >= 20 and repeats % kernels.order_period(steppers) == 0
    assert run[6][0] == "scripts/profile_pretrain_step.py"
    assert run[7][:2] == ["-m", "pytest"] and "--ignore=tests/ops/test_fused_cuda.py" in run[7]
    assert len(run) == 8


@needs_bash
@pytest.mark.parametrize("slow_step, skipped, rc", [("--batch-size 384", "tests_ops_cpu", 0),
                                                    ("benchmarks/kernels.py --device cuda --whole-model --presets",
                                                     "pretrain", 1)])
def test_a_budget_spent_before_a_step_skips_it_and_fails_the_run_unless_it_is_optional(tmp_path, slow_step, skipped,
                                                                                     rc):
    """The CPU kernel tests come last and get what is left: the budget spent before them is no failure
    of a run whose GPU targets all ran (it exited 1), while a target's step skipped still fails it.
    BUDGET=30 and one step sleeping 20 s leave under 15 s for the steps after it."""
    res, out, calls = _run_script(tmp_path, BUDGET="30", STUB_SLEEP_ON=slow_step, STUB_SLEEP="20")
    log = res.stdout
    assert f"=== SKIPPED {skipped}:" in log, log
    assert res.returncode == rc, log
    summary = log[log.index("=== steps"):]
    assert re.search(rf"^{skipped}\s+skipped \(budget spent{'; optional' if rc == 0 else ''}\)$", summary, re.M), summary


@needs_bash
def test_the_optional_last_step_stopped_by_the_budget_does_not_fail_the_run(tmp_path):
    """The CPU kernel tests start with what is left of the budget; stopped at its end (timeout's 124)
    they failed a run whose GPU targets all ran. BUDGET=25: the stub's other steps take no time, so the
    tests get the about 25 s left, and they sleep 60."""
    res, out, calls = _run_script(tmp_path, BUDGET="25", STUB_SLEEP_ON="--ignore=tests/ops/test_fused_cuda.py",
                                  STUB_SLEEP="60")
    log = res.stdout
    assert res.returncode == 0, log
    summary = log[log.index("=== steps"):]
    assert re.search(r"^tests_ops_cpu\s+exit 124 .*TIMED OUT after \d+s \(optional\)$", summary, re.M), summary


@needs_bash
def test_a_cuda_run_without_cuda_kernels_stops_loudly(tmp_path):
    res, out, calls = _run_script(tmp_path, check_rc=1)
    assert res.returncode == 2
    assert not _bench_calls(calls)  # nothing timed, no test run
    assert not any("pytest" in c for c in calls)
    log = (out / "gpu_session.log").read_text().splitlines()
    assert log[1].startswith("!!! FATAL")  # at the top of the log
    assert log[-1].startswith("!!! FATAL") or any(line.startswith("!!! FATAL") for line in log[-12:])
    assert "FATAL" in res.stdout  # and in what the device tool shows (the end of the output)


@needs_bash
@pytest.mark.parametrize("probe_rc", [0, 139])
def test_a_build_whose_cxx_exceptions_crash_is_rebuilt_with_the_system_compiler(tmp_path, probe_rc):
    """2026-11-26 on the lent machine's image (its CXX=/opt/gcc/bin/g++): every C++ exception from the
    extension was a SIGSEGV. The probe after the build throws one; a crash (exit 139) rebuilds with
    the system's g++ (CXX and CC, which nvcc's -ccbin follows) and probes again, and the run reports it."""
    if shutil.which("g++") is None:
        pytest.skip("needs a system g++")
    image_cxx = tmp_path / "image-g++"
    image_cxx.write_text("#!/bin/sh\nexit 0\n")
    image_cxx.chmod(0o755)
    res, out, calls = _run_script(tmp_path, CXX=str(image_cxx), STUB_PROBE_RC=str(probe_rc))
    builds = [c for c in calls if "setup.py" in c]
    probes = [c for c in calls if "fused.char_cnn(torch.ones" in c]
    log = res.stdout
    if probe_rc == 0:
        assert len(builds) == 1 and len(probes) == 1, calls
        assert "C++ exceptions: raised as RuntimeError" in log and res.returncode == 0, log
        return
    assert len(builds) == 2 and len(probes) == 2, calls
    assert "build_ext --inplace --force" in builds[1], builds  # every object again, with the other compiler
    assert f"rebuilding with {shutil.which('g++')}" in log, log
    summary = log[log.index("=== steps"):]
    assert re.search(r"^build_ext_syscxx\s+exit   0 ", summary, re.M), summary
    assert re.search(r"^exception_probe\s+exit 139 .*C\+\+ exceptions crash", summary, re.M), summary
    assert res.returncode == 1  # the crash is reported as a failure of the run, whatever the rebuild gave
    assert _bench_calls(calls)  # and the targets are still timed


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


@pytest.mark.skipif(not fused_available(), reason="spacy_elmo._C is not built")
def test_profile_script_profiles_a_pretraining_step_and_the_inference_forward(tmp_path, capsys):
    """The lease's profile step: both parts write their tables to --out, and each prints its
    unprofiled wall time beside the profiled totals (the host-or-device question)."""
    out = tmp_path / "prof.txt"
    profile_pretrain_step.main(["--device", "cpu", "--runs", "fused:small", "--batch-size", "2", "--steps", "1",
                                "--forward-runs", "fused:small", "--forward-batch", "2", "--rows", "3",
                                "--out", str(out)])
    tables = out.read_text()
    assert "##### pretraining step fused small B=2, 1 steps" in tables
    assert "##### inference forward fused small B=2 x 20, 1 steps" in tables
    printed = capsys.readouterr().out
    walls = re.findall(r"^##### (.+): per step wall ([\d.]+) ms unprofiled; profiled: self CPU ([\d.]+) ms", printed, re.M)
    assert [w[0] for w in walls] == ["pretraining step fused small B=2", "inference forward fused small B=2 x 20"]
    assert all(float(w[1]) > 0 and float(w[2]) > 0 for w in walls)


def test_profile_device_totals_count_each_kernel_once():
    """The profile's per-step device time: the first GPU runs printed 25.7 ms a step where torch's table
    said 12.0, adding the ops' self device time (their kernels') to the kernels' rows and the optimizer's
    annotation on the GPU timeline."""
    from types import SimpleNamespace as E

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    events = [E(device_type=cpu, is_user_annotation=False, self_device_time_total=500.0, count=3),  # aten::mm
              E(device_type=cuda, is_user_annotation=False, self_device_time_total=500.0, count=3),  # its kernel
              E(device_type=cuda, is_user_annotation=True, self_device_time_total=200.0, count=1),  # Optimizer.step#
              E(device_type=cuda, is_user_annotation=False, self_device_time_total=40.0, count=2)]  # a copy
    assert profile_pretrain_step.device_totals(events) == (540.0, 5)
