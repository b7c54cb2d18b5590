"""`spacy-elmo info`: the versions and the build facts, checked against sources of their own."""

import importlib.metadata
import json
import os
import platform
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import __version__, ops, switches
from spacy_elmo.cli import app
from spacy_elmo.errors import Warnings
from spacy_elmo.ops import extension

from .cli_text import plain


def _info(*args, cap=None, switches_set=None, stderr=False):
    """The output of ``python -m spacy_elmo info *args`` in a process of its own (the kernel table is chosen
    once per process) with SPACY_ELMO_CPU_ISA set to ``cap`` (None: unset), the other SPACY_ELMO_* switches
    ``switches_set`` and no other; with its stderr too if ``stderr``."""
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    env.update(switches_set or {})
    if cap is not None:
        env["SPACY_ELMO_CPU_ISA"] = cap
    res = subprocess.run([sys.executable, "-m", "spacy_elmo", "info", *args], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    return (res.stdout, res.stderr) if stderr else res.stdout


def _cpu_flags():
    """The flags of /proc/cpuinfo's first processor (None where there is none: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def _widest_isa(flags):
    """The widest kernel table a CPU with ``flags`` runs, by the rule of csrc/cpu/dispatch.cpp."""
    if {"avx2", "fma"} <= flags:
        return "avx512" if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags else "avx2"
    return "base"


def test_info_prints_the_versions_and_what_runs():
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    text = plain(result.output)
    assert f"spacy-elmo: {__version__}" in text and f"torch: {torch.__version__}" in text
    assert f"torch threads: {torch.get_num_threads()}" in text
    if ops.fused_available():
        assert "Compiled kernels: yes" in text and f"CPU kernels: {ops.build_info().cpu_isa}" in text


def test_info_json_agrees_with_independent_sources():
    result = CliRunner().invoke(app, ["info", "--json"])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["spacy_elmo"] == __version__ and facts["python"] == platform.python_version()
    assert facts["torch"] == torch.__version__ and facts["torch_cuda"] == torch.version.cuda
    assert facts["torch_threads"] == torch.get_num_threads()
    try:
        assert facts["spacy"] == importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        assert facts["spacy"] is None
    build = facts["build"]
    assert build["extension"] == ops.fused_available()
    assert len(facts["gpus"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if not build["extension"]:
        return
    assert build["reason"] == "" and build["fix"] == ""
    from spacy_elmo.ops import fused

    assert build["cpu_isa"] == fused.cpu_isa() and build["cuda"] == fused.built_with_cuda()
    if torch.version.cuda is None:  # a CUDA extension builds only against a CUDA torch
        assert not build["cuda"] and build["cuda_archs"] == []
    if platform.system() == "Linux":  # build_flags.py: Linux always builds with the compiler's OpenMP
        assert build["openmp"] is True and build["openmp_version"] >= 200805


@pytest.mark.skipif(not ops.fused_available(), reason="spacy_elmo._C is not built")
@pytest.mark.skipif(_cpu_flags() is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="x86 /proc/cpuinfo needed")
def test_info_reports_the_isa_this_cpu_supports_and_the_one_picked():
    """The dispatch's pick against /proc/cpuinfo's flags: the widest table unless SPACY_ELMO_CPU_ISA caps it."""
    widest = _widest_isa(_cpu_flags())
    build = json.loads(_info("--json"))["build"]
    assert (build["cpu_isa"], build["cpu_isa_supported"], build["cpu_isa_cap"]) == (widest, widest, None)
    capped = json.loads(_info("--json", cap="base"))["build"]
    assert (capped["cpu_isa"], capped["cpu_isa_supported"], capped["cpu_isa_cap"]) == ("base", widest, "base")
    if widest != "base":
        text = plain(_info(cap="base"))
        assert f"CPU kernels: base (capped by SPACY_ELMO_CPU_ISA=base; this CPU runs {widest})" in text


def test_cuda_arch_list_reads_as_compute_capabilities():
    assert extension.cuda_archs("750,800,900") == ["7.5", "8.0", "9.0"]
    assert extension.cuda_archs("1000,1200") == ["10.0", "12.0"]
    assert extension.cuda_archs("") == []


def test_info_without_the_extension_says_why_and_how_to_fix(monkeypatch):
    monkeypatch.setattr(extension, "load_extension", lambda: (None, "simulated: not built"))
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    text = plain(result.output)
    fix = " ".join(extension.extension_fix().split())
    assert "Compiled kernels: no, the pure-PyTorch reference path runs" in text
    assert "Reason: simulated: not built." in text and fix in text
    assert "CPU kernels:" not in text  # no build facts without a build
    build = json.loads(CliRunner().invoke(app, ["info", "--json"]).output)["build"]
    assert build == {"extension": False, "reason": "simulated: not built", "fix": extension.extension_fix(),
                     "cpu_isa": None, "cpu_isa_supported": None, "cpu_isa_cap": os.environ.get("SPACY_ELMO_CPU_ISA"),
                     "openmp": None, "openmp_version": None, "cuda": None, "cuda_archs": []}


def test_version_without_the_extension_says_so_once(monkeypatch):
    """--version said "compiled kernels: no" and printed W_NO_EXTENSION (some 500 characters) on stderr as well:
    it is hidden there, as info hides it, and the line points at info for the reason."""
    import warnings

    def missing():
        warnings.warn(Warnings.W_NO_EXTENSION.format(reason="simulated: not built", fix=extension.extension_fix()),
                      RuntimeWarning)
        return None, "simulated: not built"

    monkeypatch.setattr(extension, "load_extension", missing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert "compiled kernels: no, the reference path runs: spacy-elmo info says why" in result.output
    assert [str(w.message) for w in caught if "spacy_elmo._C" in str(w.message)] == []


def test_info_says_the_build_switches_change_nothing_at_run_time(monkeypatch):
    """SPACY_ELMO_NO_EXTENSION and SPACY_ELMO_CUDA were listed as set, though setup.py alone reads them: info says
    so; a switch read at run time has no such note."""
    for name in switches.SWITCHES:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SPACY_ELMO_NO_EXTENSION": "1", "SPACY_ELMO_CUDA": "0", "SPACY_ELMO_KEEP_FREED_MEMORY": "0"}.items():
        monkeypatch.setenv(name, value)
    line = [row for row in CliRunner().invoke(app, ["info"]).output.splitlines() if row.startswith("SPACY_ELMO_* set:")]
    off, cpu = (Warnings.W_INFO_SWITCH_BUILD_TIME.format(setting=s) for s in ("SPACY_ELMO_NO_EXTENSION=1", "SPACY_ELMO_CUDA=0"))
    assert f"SPACY_ELMO_NO_EXTENSION=1 ({off}); SPACY_ELMO_CUDA=0 ({cpu}); SPACY_ELMO_KEEP_FREED_MEMORY=0" in line[0]
    assert "`SPACY_ELMO_CUDA=0 pip install --no-cache-dir" in line[0]  # the rebuild command sets it


def test_info_suggests_no_rebuild_with_a_build_switch_value_it_calls_invalid(monkeypatch):
    """SPACY_ELMO_CUDA=yes: the note said to rebuild with `SPACY_ELMO_CUDA=yes pip install ...` and, in the same
    sentence, that yes is no value of it. The note says the switch is read at build time, then its problem."""
    for name in switches.SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPACY_ELMO_CUDA", "yes")
    line = [row for row in CliRunner().invoke(app, ["info"]).output.splitlines() if row.startswith("SPACY_ELMO_* set:")]
    invalid = switches.problem("SPACY_ELMO_CUDA", "yes")
    assert invalid and line == [f"SPACY_ELMO_* set: SPACY_ELMO_CUDA=yes ({Warnings.W_INFO_SWITCH_BUILD_TIME_INVALID} {invalid})"]
    assert "pip install" not in line[0]


def test_info_says_when_the_kernels_have_no_openmp(monkeypatch):
    """A macOS build without libomp (build_flags.py) was invisible at run time."""
    real = ops.build_info()
    if not real.extension:
        pytest.skip("spacy_elmo._C is not built")
    import dataclasses

    from spacy_elmo.cli import info as info_module

    monkeypatch.setattr(info_module.ops, "build_info", lambda: dataclasses.replace(real, openmp=False,
                                                                                  openmp_version=None))
    text = plain(CliRunner().invoke(app, ["info"]).output)
    assert "OpenMP: " + " ".join(Warnings.W_INFO_NO_OPENMP.split()) in text


def test_info_on_an_extension_built_before_build_info_says_to_rebuild(monkeypatch):
    """An editable install pulled without a rebuild: its _C loads, with no build_info(). info crashed
    with an AttributeError and a traceback."""
    stale = type(sys)("spacy_elmo._C")  # a module with none of the new functions
    monkeypatch.setattr(extension, "load_extension", lambda: (stale, ""))
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    text = plain(result.output)
    stale_text = " ".join(Warnings.W_INFO_STALE_EXTENSION.format(fix=extension.extension_fix()).split())
    assert "Compiled kernels: yes (spacy_elmo._C), but " + stale_text in text
    assert "CPU kernels:" not in text
    build = json.loads(CliRunner().invoke(app, ["info", "--json"]).output)["build"]
    assert build["extension"] is True and build["cpu_isa"] is None and build["fix"] == extension.extension_fix()


@pytest.mark.skipif(not ops.fused_available(), reason="spacy_elmo._C is not built")
@pytest.mark.parametrize("cap", ["", "AVX2"])
def test_info_names_a_cpu_isa_setting_the_dispatch_does_not_know(cap):
    """Any value but base, avx2 or avx512 (the empty one too) runs the base table; info said 'capped by
    SPACY_ELMO_CPU_ISA=None' for the empty value, and called an unknown one a cap."""
    build = json.loads(_info("--json", cap=cap))["build"]
    assert (build["cpu_isa"], build["cpu_isa_cap"]) == ("base", cap)
    text, stderr = _info(cap=cap, stderr=True)
    said = " ".join(switches.problem("SPACY_ELMO_CPU_ISA", cap).split())
    text = plain(text)
    assert f"CPU kernels: base (SPACY_ELMO_CPU_ISA={cap!r} is not a value it takes: see 'SPACY_ELMO_* set')" in text
    assert f"SPACY_ELMO_CPU_ISA={cap} (" + said + ")" in text
    assert " ".join(text.split()).count(said) == 1  # the problem is told once, on the switches' row
    assert "SPACY_ELMO_CPU_ISA" not in stderr  # info says it once, not also as the warning of the load


def test_info_lists_the_switches_set_and_what_is_wrong_with_each(monkeypatch):
    """Every SPACY_ELMO_* switch set, valid or not, on one line and in the JSON; an unknown value with the
    warning's text (which names the value, the values it takes and what runs instead)."""
    for name in switches.SWITCHES:
        monkeypatch.delenv(name, raising=False)
    assert "SPACY_ELMO_* set: none" in plain(CliRunner().invoke(app, ["info"]).output)
    for name, value in {"SPACY_ELMO_CHAR_CNN_MMA": "false", "SPACY_ELMO_LSTM_PRODUCTS": "per-direction",
                        "SPACY_ELMO_KEEP_FREED_MEMORY": "0", "SPACY_ELMO_CACHE": ""}.items():
        monkeypatch.setenv(name, value)
    facts = json.loads(CliRunner().invoke(app, ["info", "--json"]).output)["switches"]
    mma = "SPACY_ELMO_CHAR_CNN_MMA='false' is none of the values spacy-elmo takes for it (0 | 1)"
    cache = "SPACY_ELMO_CACHE='' is none of the values spacy-elmo takes for it (a directory path, not empty)"
    assert {name: (f["value"], f["problem"] is None) for name, f in facts.items()} == {
        "SPACY_ELMO_CHAR_CNN_MMA": ("false", False), "SPACY_ELMO_LSTM_PRODUCTS": ("per-direction", True),
        "SPACY_ELMO_KEEP_FREED_MEMORY": ("0", True), "SPACY_ELMO_CACHE": ("", False)}
    assert facts["SPACY_ELMO_CHAR_CNN_MMA"]["problem"].startswith(mma)
    assert facts["SPACY_ELMO_CACHE"]["problem"].startswith(cache)
    output = CliRunner().invoke(app, ["info"]).output
    line = [row for row in output.splitlines() if row.startswith("SPACY_ELMO_* set:")]
    assert len(line) == 1, output
    assert f"SPACY_ELMO_CHAR_CNN_MMA=false ({mma}" in line[0] and "; SPACY_ELMO_LSTM_PRODUCTS=per-direction; " in line[0]
    assert "; SPACY_ELMO_KEEP_FREED_MEMORY=0; " in line[0] and f"; SPACY_ELMO_CACHE= ({cache}" in line[0]


@pytest.mark.parametrize("archs, line", [(["7.5", "9.0"], "compiled for the virtual architectures compute_75, compute_90"),
                                         ([], "compiled in (nvcc did not list its targets: CUDA < 11.5)")])
def test_info_cuda_line(monkeypatch, archs, line):
    """The CUDA kernels' line, from the facts alone (no GPU here); an empty list printed 'compute_? (...)'."""
    import dataclasses

    from spacy_elmo.cli import info as info_module

    real = ops.build_info()
    if not real.extension:
        pytest.skip("spacy_elmo._C is not built")
    monkeypatch.setattr(info_module.ops, "build_info", lambda: dataclasses.replace(real, cuda=True, cuda_archs=archs))
    assert f"CUDA kernels: {line}" in plain(CliRunner().invoke(app, ["info"]).output)


@pytest.mark.parametrize("capability, archs, note", [
    ("9.0", ["8.0", "9.0"], "the fp16/bf16 char CNN runs on tensor cores"),
    ("8.6", ["7.5", "9.0"], Warnings.W_INFO_GPU_NO_TENSOR_CORES.format(arch="7.5", cap="8.6")),
    ("7.0", ["8.0", "9.0"], Warnings.W_INFO_GPU_NO_CODE.format(archs="8.0, 9.0", cap="7.0")),
    ("12.0", ["9.0"], "the fp16/bf16 char CNN runs on tensor cores"),  # 12.0 > 9.0 as numbers, not as text
    ("8.0", ["8.0"], "the fp16/bf16 char CNN runs on tensor cores"),  # its own architecture: at or below, 8.0 on
])
def test_info_says_whether_a_gpu_runs_the_char_cnn_on_tensor_cores(capability, archs, note):
    """From the facts alone (no GPU here): the driver runs the highest compiled architecture at or below the
    GPU's capability; below 8.0 the tensor-core kernel is empty, and with none at or below, nothing runs."""
    from spacy_elmo.cli.info import _rows, info_facts

    facts = info_facts()
    if not facts["build"]["extension"]:
        pytest.skip("spacy_elmo._C is not built")
    facts["build"] = {**facts["build"], "cuda": True, "cuda_archs": archs}
    facts["gpus"] = [{"name": "Some GPU", "capability": capability}]
    gpu = dict(_rows(facts))["GPU"]
    assert gpu == f"Some GPU (compute capability {capability}; {note})"
    # a CPU-only build: its fused ops run the reference on the GPU (ops.cuda_route), and the row says so
    facts["build"] = {**facts["build"], "cuda": False}
    assert dict(_rows(facts))["GPU"] == (f"Some GPU (compute capability {capability}; "
                                         f"{Warnings.W_INFO_GPU_NO_CUDA_KERNELS})")
    facts["build"] = {**facts["build"], "cuda": None}  # an older build that says nothing of itself
    assert dict(_rows(facts))["GPU"] == f"Some GPU (compute capability {capability})"


def test_info_rows_say_a_cpu_only_torch_and_a_missing_spacy():
    """torch without CUDA is "(CPU only)", with it "(CUDA V)"; spaCy not installed is said so (its version None,
    JSON null: read from metadata, never imported)."""
    from spacy_elmo.cli.info import _rows, info_facts

    facts = info_facts()
    rows = dict(_rows({**facts, "torch_cuda": None, "spacy": None}))
    assert (rows["torch"], rows["spaCy"]) == (f"{facts['torch']} (CPU only)", "not installed")
    rows = dict(_rows({**facts, "torch_cuda": "12.4", "spacy": "3.8.0"}))
    assert (rows["torch"], rows["spaCy"]) == (f"{facts['torch']} (CUDA 12.4)", "3.8.0")


def test_info_json_says_null_for_a_spacy_not_installed(monkeypatch):
    from spacy_elmo.cli import info as info_module

    real = importlib.metadata.version

    def version(name):
        if name == "spacy":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(info_module.importlib.metadata, "version", version)
    result = CliRunner().invoke(app, ["info", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["spacy"] is None
