"""Benchmark results name the CPU they ran on: machines of one kind come with CPUs
whose float32 GEMM peaks differ about 2x (Intel Xeon with AMX, AMD EPYC Zen 4)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.kernels import cpu_identity  # noqa: E402

_BLOCK = """processor\t: {n}
vendor_id\t: {vendor}
cpu family\t: {family}
model\t\t: {model}
model name\t: {name}
flags\t\t: fpu sse2 {flags}
"""


def _cpuinfo(tmp_path, *blocks):
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(_BLOCK.format(n=i, **b) for i, b in enumerate(blocks)))
    return path


def test_reads_the_first_processor_and_its_peak_flags(tmp_path):
    intel = dict(vendor="GenuineIntel", family=6, model=143, name="Intel(R) Xeon(R) Processor",
                 flags="avx2 avx512f amx_bf16 amx_tile avx512_bf16 avx512_vnni")
    amd = dict(vendor="AuthenticAMD", family=25, model=17, name="AMD EPYC", flags="avx2 avx512f")
    info = cpu_identity(_cpuinfo(tmp_path, intel, amd))
    assert info == {"cpu": "Intel(R) Xeon(R) Processor", "cpu_vendor": "GenuineIntel",
                    "cpu_family_model": "6/143",
                    "cpu_peak_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]}
    assert cpu_identity(_cpuinfo(tmp_path, amd))["cpu_peak_flags"] == ["avx2", "avx512f"]


def test_no_cpuinfo_gives_nothing(tmp_path):
    assert cpu_identity(tmp_path / "missing") == {}


def test_the_sampler_benchmark_records_its_options_and_cpu(tmp_path):
    """benchmarks/sampler.py's JSON said neither how it was run nor on which CPU (the times depend on both)."""
    import json

    import torch

    from benchmarks import sampler
    from benchmarks.kernels import machine_info

    out = tmp_path / "s.json"
    threads = torch.get_num_threads()
    try:
        assert sampler.main(["--vocab-sizes", "500", "--negatives", "16", "--repeats", "1", "--threads", "1",
                             "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    record = json.loads(out.read_text())
    assert record["args"] == {"vocab_sizes": [500], "negatives": 16, "repeats": 1, "threads": 1, "out": str(out)}
    expected = machine_info(torch.device("cpu"))
    for key in ("cpu", "cpu_family_model", "cpu_peak_flags", "cpu_count", "torch"):
        assert record["machine"].get(key) == (list(expected[key]) if key == "cpu_peak_flags" else expected.get(key))
    assert record["machine"]["threads"] == 1
