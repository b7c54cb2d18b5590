"""build_flags.py (the flags setup.py builds spacy_elmo._C with, per platform) and setup.py's use of
them: setup.py is run in a subprocess with platform.system() answering another platform and
setuptools.setup replaced by a recorder, so the extension it would declare there is seen without
compiling anything. The sources' compiling for those platforms is scripts/cross_compile_check.py's
job (`make cross-check`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import build_flags
from spacy_elmo import switches

ROOT = Path(__file__).resolve().parent.parent

# Runs setup.py with platform.system() -> argv[1] and prints the extension it declares
# (or null) and what it wrote on stderr.
_DECLARED = """
import contextlib, io, json, platform, runpy, sys
import setuptools
import torch.utils.cpp_extension  # imported as itself first: torch reads platform.system() too
platform.system = lambda: sys.argv[1]
seen = {}
setuptools.setup = lambda **kw: seen.update(kw)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    runpy.run_path("setup.py")
ext = (seen.get("ext_modules") or [None])[0]
print(json.dumps({"ext": None if ext is None else {"cxx": ext.extra_compile_args["cxx"],
                  "link": ext.extra_link_args}, "stderr": err.getvalue()}))
"""


def declared(system, switches_set=None):
    """What setup.py declares on ``system``, with the SPACY_ELMO_* switches ``switches_set`` and no other."""
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    res = subprocess.run([sys.executable, "-c", _DECLARED, system], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**env, **(switches_set or {})})
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.parametrize("name, value, builds", [
    ("SPACY_ELMO_NO_EXTENSION", "1", False), ("SPACY_ELMO_NO_EXTENSION", "0", True),
    ("SPACY_ELMO_NO_EXTENSION", "true", True), ("SPACY_ELMO_CUDA", "yes", True), ("SPACY_ELMO_CUDA", "0", True)])
def test_setup_py_takes_its_switches_exactly_and_warns_for_another_value(name, value, builds):
    """setup.py's two switches through spacy_elmo/switches.py (loaded by path): a value they do not take
    ("true", "yes": silently a build, silently no CUDA) is a warning naming it, and the default runs."""
    got = declared("Linux", {name: value})
    assert (got["ext"] is not None) == builds
    said = switches.problem(name, value)
    if said is None:
        assert got["stderr"] == ""
    else:
        assert f"{name}={value!r} is none of the values" in said and said in got["stderr"]


def test_linux_keeps_gcc_openmp_flags():
    """Linux builds with the compiler's OpenMP, as every release did; linked with the runtime torch
    loaded where its wheel renamed it (:func:`build_flags.torch_gomp`), else with ``-fopenmp``."""
    import torch

    got = declared("Linux")
    renamed = build_flags.torch_gomp(os.path.dirname(torch.__file__))
    assert got["ext"] == {"cxx": ["-O3", "-fopenmp", "-fno-trapping-math", "-fno-math-errno", "-g0"],
                          "link": ["-fopenmp"] if renamed is None else [renamed]}
    assert got["stderr"] == ""


def test_windows_builds_no_extension_and_says_why():
    got = declared("Windows")
    assert got["ext"] is None
    assert "no compiled extension on Windows" in got["stderr"] and "MSVC" in got["stderr"]
    assert "WSL2" in got["stderr"]


def test_macos_without_torch_libomp_builds_without_openmp_and_says_so():
    """This machine's torch (a Linux wheel) has no libomp.dylib: what a macOS torch without one
    gives. Apple clang rejects -fopenmp, so no flag of OpenMP's runtime; the omp simd loops keep
    -fopenmp-simd where the compiler takes it (this machine's does)."""
    import torch

    got = declared("Darwin")
    cxx = got["ext"]["cxx"]
    assert "-fopenmp" not in cxx and "-Xpreprocessor" not in cxx
    assert "-fopenmp-simd" in cxx and got["ext"]["link"] == []
    assert "without OpenMP" in got["stderr"] and str(Path(torch.__file__).parent) in got["stderr"]
    assert "one thread" in got["stderr"]


@pytest.mark.parametrize("system, libomp", [("Linux", None), ("Darwin", "/t/lib"), ("Darwin", None), ("FreeBSD", None)])
def test_the_extension_is_built_without_debug_info(system, libomp):
    """Python's sysconfig CFLAGS (-g) come before the extension's own flags on the compile line, and the last
    -g option wins: -g0 last keeps _C at about 1 MB instead of 21 MB of DWARF in every wheel."""
    flags = build_flags.flags_for(system, libomp, accepts=lambda flag: True)
    assert flags.build and flags.cxx[-1] == "-g0"
    assert [f for f in flags.cxx if f.startswith("-g")] == ["-g0"]


def _fake_torch(root: Path, *files):
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return str(root)


def test_macos_uses_the_libomp_torch_ships(tmp_path):
    """A torch wheel for macOS ships omp.h and libomp.dylib: OpenMP through the preprocessor
    (Apple clang's driver has no -fopenmp) and that libomp linked, found again at run time."""
    torch_dir = _fake_torch(tmp_path, "include/omp.h", "lib/libomp.dylib")
    lib = build_flags.torch_libomp(torch_dir)
    assert lib == str(tmp_path / "lib")
    flags = build_flags.flags_for("Darwin", lib, accepts=lambda flag: pytest.fail("no probe needed"))
    assert flags.build and flags.openmp == "libomp" and flags.message == ""
    assert flags.cxx[-3:] == ["-Xpreprocessor", "-fopenmp", "-g0"]
    # the file itself: an LDFLAGS -L to Homebrew's libomp would make -lomp a second OpenMP runtime
    assert flags.link == [os.path.join(lib, "libomp.dylib"), f"-Wl,-rpath,{lib}"]


@pytest.mark.parametrize("files", [["include/omp.h"], ["lib/libomp.dylib"], []])
def test_libomp_needs_both_its_header_and_its_library(tmp_path, files):
    assert build_flags.torch_libomp(_fake_torch(tmp_path, *files)) is None


def test_no_openmp_simd_flag_for_a_compiler_that_rejects_it():
    flags = build_flags.flags_for("Darwin", None, accepts=lambda flag: False, torch_dir="/t")
    assert flags.build and flags.openmp == "none"
    assert not [f for f in flags.cxx if "openmp" in f]
    assert "/t" in flags.message


def test_compiler_probe_tells_a_known_flag_from_an_unknown_one():
    """The probe behind -fopenmp-simd, asked of this machine's compiler."""
    cxx = build_flags.host_cxx()
    assert build_flags.compiler_accepts(cxx, "-O2")
    assert not build_flags.compiler_accepts(cxx, "-fno-such-flag-spacy-elmo")
    assert not build_flags.compiler_accepts(["no-such-compiler-spacy-elmo"], "-O2")


def _maps(tmp_path, *loaded):
    """A /proc/self/maps of a process that loaded ``loaded`` (paths under tmp_path)."""
    lines = [f"7f00{i:08x}-7f01{i:08x} r-xp 00000000 00:1f 42   {tmp_path / p}" for i, p in enumerate(loaded)]
    lines.append("7ffd0000-7ffd1000 rw-p 00000000 00:00 0                          [stack]")
    (tmp_path / "maps").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "maps")


@pytest.mark.parametrize("where", ["torch.libs/libgomp-a49a47f9.so.1.0.0", "torch/lib/libgomp-947d5fa1.so.1.0.0"])
def test_linux_links_the_renamed_libgomp_torch_ships(tmp_path, where):
    """pypi's aarch64 torch wheels (2.9.1 here; x86-64 ones of about 2.5-2.8 too) ship GNU OpenMP as
    ``libgomp-HASH.so.1.0.0`` (its soname too): the extension links the file torch loaded, so it shares
    torch's runtime; ``-fopenmp``'s ``-lgomp`` would load the system's libgomp.so.1 beside it, whose
    teams ignore torch.set_num_threads (seen on emulated aarch64: scripts/arm_emulated_check.sh counts
    the runtimes loaded)."""
    torch_dir = os.path.join(_fake_torch(tmp_path, where, "torch/lib/libtorch_cpu.so"), "torch")
    gomp = build_flags.torch_gomp(torch_dir, maps=_maps(tmp_path, "torch/lib/libtorch_cpu.so", where))
    assert gomp == str(tmp_path / where)
    flags = build_flags.flags_for("Linux", None, accepts=lambda flag: pytest.fail("no probe needed"), gomp=gomp)
    assert flags.build and flags.openmp == "openmp" and flags.message == ""
    assert flags.cxx == ["-O3", "-fopenmp", "-fno-trapping-math", "-fno-math-errno", "-g0"]
    assert flags.link == [gomp]


def test_linux_keeps_fopenmp_where_torch_loaded_libgomp_by_its_own_name(tmp_path):
    """x86-64 wheels (2.13 here; aarch64 ones from about 2.10) ship ``torch/lib/libgomp.so.1``: the
    soname ``-fopenmp`` links, already torch's runtime once torch is loaded. A renamed copy left
    beside it by an earlier wheel is no runtime of this process: linking it made two again."""
    torch_dir = os.path.join(_fake_torch(tmp_path, "torch/lib/libgomp.so.1", "torch/lib/libtorch_cpu.so",
                                         "torch.libs/libgomp-0ld.so.1.0.0"), "torch")
    maps = _maps(tmp_path, "torch/lib/libtorch_cpu.so", "torch/lib/libgomp.so.1")
    assert build_flags.torch_gomp(torch_dir, maps=maps) is None
    assert build_flags.torch_gomp(torch_dir, maps=str(tmp_path / "no-maps")) is None
    assert build_flags.flags_for("Linux", None, accepts=lambda flag: False).link == ["-fopenmp"]


def test_a_renamed_libgomp_of_another_package_is_not_torchs(tmp_path):
    torch_dir = os.path.join(_fake_torch(tmp_path, "torch/lib/libtorch_cpu.so", "numpy.libs/libgomp-1234.so.1"),
                             "torch")
    assert build_flags.torch_gomp(torch_dir, maps=_maps(tmp_path, "numpy.libs/libgomp-1234.so.1")) is None


# Runs setup.py (setuptools.setup recorded, not run) in a Python where ``import torch`` fails.
_WITHOUT_TORCH = """
import runpy, sys
import setuptools
sys.modules["torch"] = None  # import torch -> ImportError, as where torch is not installed
setuptools.setup = lambda **kw: None
runpy.run_path("setup.py")
"""


def test_setup_py_without_torch_stops_saying_how_to_install_it():
    """`pip install --no-build-isolation .` before torch: a message with the fix, not a bare
    ModuleNotFoundError from setup.py."""
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    res = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH], cwd=ROOT, capture_output=True, text=True, env=env)
    assert res.returncode == 1
    assert "needs torch" in res.stderr and "pip install torch==" in res.stderr
    assert "SPACY_ELMO_NO_EXTENSION=1" in res.stderr and "Traceback" not in res.stderr
    # the switch builds nothing, so it needs no torch
    res = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "SPACY_ELMO_NO_EXTENSION": "1"})
    assert res.returncode == 0, res.stderr


def test_compiler_problem_names_the_missing_compiler(monkeypatch):
    monkeypatch.setenv("CXX", "/no/such/dir/g++ -m64")
    said = build_flags.compiler_problem()
    assert "'/no/such/dir/g++'" in said and "$CXX" in said and "SPACY_ELMO_NO_EXTENSION=1" in said
    monkeypatch.delenv("CXX")
    said = build_flags.compiler_problem(which=lambda name: None)
    assert "'c++'" in said and "set CXX" in said
    assert build_flags.compiler_problem(which=lambda name: f"/usr/bin/{name}") == ""
    assert build_flags.compiler_problem() == ""  # this machine's c++, which the other tests compile with


@pytest.mark.parametrize("cxx", ["/no/such/dir/c++", None])
def test_build_without_a_compiler_stops_with_the_fix(tmp_path, cxx):
    """setup.py build_ext with no C++ compiler ($CXX a missing file, or no ``c++`` on PATH): the message
    that says what to install or set, not torch's "Error compiling objects for extension" traceback.
    Run on a copy holding what setup.py reads and one source file, which is never compiled."""
    for name in ["setup.py", "build_flags.py", "spacy_elmo/errors.py", "spacy_elmo/switches.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "bindings.cpp").write_text("#error never compiled here\n")
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES and k not in ("CXX", "CC")}
    env["SPACY_ELMO_CUDA"] = "0"
    if cxx is None:
        (tmp_path / "bin").mkdir()  # a PATH with ninja (torch's build needs it) and no compiler
        ninja = Path(sys.executable).parent / "ninja"
        if ninja.exists():
            (tmp_path / "bin" / "ninja").symlink_to(ninja)
        env["PATH"] = str(tmp_path / "bin")
    else:
        env["CXX"] = cxx
    res = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)
    assert res.returncode == 1
    assert "needs a C++ compiler" in res.stderr and repr(cxx or "c++") in res.stderr
    assert "SPACY_ELMO_NO_EXTENSION=1" in res.stderr and "Error compiling objects" not in res.stderr
    assert not list(tmp_path.glob("spacy_elmo/_C*"))


@pytest.mark.parametrize("version, stops", [("65.5.0", True), ("76.1.0", True), ("77.0.3", False), ("84.2.1", False),
                                            ("100.0", False), ("unknown", False)])
def test_setuptools_problem_names_an_older_setuptools_than_the_license_field_needs(version, stops):
    said = build_flags.setuptools_problem(version)
    assert bool(said) == stops
    if stops:
        assert f"setuptools {version}" in said and 'pip install "setuptools>=77" wheel ninja' in said


def test_pyproject_requires_the_setuptools_setup_py_checks_for():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    requires = pyproject.split("[build-system]")[1].split("\n[")[0]
    assert f'"setuptools>={build_flags.SETUPTOOLS_MIN}"' in requires


# Runs setup.py (setuptools.setup recorded, not run) with setuptools.__version__ -> argv[1]: what a venv's own
# setuptools (65.5 with Python 3.11's venv) gives an install with --no-build-isolation.
_OLD_SETUPTOOLS = """
import runpy, sys
import setuptools
setuptools.__version__ = sys.argv[1]
setuptools.setup = lambda **kw: print("setup() called")
runpy.run_path("setup.py")
"""


@pytest.mark.parametrize("switches_set", [{}, {"SPACY_ELMO_NO_EXTENSION": "1"}])
def test_setup_py_with_an_old_setuptools_stops_before_setup_saying_how_to_upgrade(switches_set):
    """setuptools 65 stopped inside setup() on pyproject's ``license = "MIT"`` with a schema error ("must be
    valid exactly by one definition") that names no fix; E_BUILD_NO_TORCH's SPACY_ELMO_NO_EXTENSION=1 led there
    too. setup.py now stops first, with or without the extension."""
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    res = subprocess.run([sys.executable, "-c", _OLD_SETUPTOOLS, "65.5.0"], cwd=ROOT, capture_output=True, text=True,
                         env={**env, **switches_set})
    assert res.returncode == 1 and "setup() called" not in res.stdout
    assert "setuptools 65.5.0" in res.stderr and '"setuptools>=77"' in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-c", _OLD_SETUPTOOLS, "77.0.3"], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "SPACY_ELMO_NO_EXTENSION": "1"})
    assert res.returncode == 0 and "setup() called" in res.stdout, res.stderr


@pytest.mark.parametrize("want, torch_cuda, cuda_home, expected", [
    ("0", "12.8", "/usr/local/cuda", (False, None)),
    ("auto", "12.8", "/usr/local/cuda", (True, None)),
    ("auto", None, None, (False, None)),
    ("auto", "12.8", None, (False, None)),
    ("1", "12.8", "/usr/local/cuda", (True, None)),
    ("1", None, None, (False, "E_BUILD_CUDA_CPU_TORCH")),
    ("1", None, "/usr/local/cuda", (False, "E_BUILD_CUDA_CPU_TORCH")),
    ("1", "12.8", None, (False, "E_BUILD_CUDA_NO_TOOLKIT")),
])
def test_cuda_choice_stops_where_cuda_1_cannot_build_the_cuda_kernels(want, torch_cuda, cuda_home, expected):
    """SPACY_ELMO_CUDA=1 with a CPU-only torch, or without a toolkit torch finds: a message naming which is
    missing and its fix, where torch's CUDAExtension raised "CUDA_HOME environment variable is not set" for
    both; auto quietly builds the CPU kernels only."""
    use, said = build_flags.cuda_choice(want, "2.13.0+cu128", torch_cuda, cuda_home)
    assert use == expected[0]
    if expected[1] is None:
        assert said == ""
    else:
        message = getattr(build_flags.Errors, expected[1])
        assert said == message.format(torch="2.13.0+cu128", cuda=torch_cuda)
        assert "SPACY_ELMO_CUDA" in said and ("CPU-only" in said) == (torch_cuda is None)


# Runs setup.py (setuptools.setup recorded, not run) with a torch that reports no CUDA.
_CPU_TORCH = """
import runpy
import setuptools
import torch
torch.version.cuda = None  # a CPU-only torch (this machine's may have CUDA)
setuptools.setup = lambda **kw: print("setup() called")
runpy.run_path("setup.py")
"""


def test_setup_py_with_cuda_1_and_a_cpu_only_torch_stops_with_the_fix():
    env = {k: v for k, v in os.environ.items() if k not in switches.SWITCHES}
    res = subprocess.run([sys.executable, "-c", _CPU_TORCH], cwd=ROOT, capture_output=True, text=True,
                         env={**env, "SPACY_ELMO_CUDA": "1"})
    assert res.returncode == 1 and "setup() called" not in res.stdout
    assert "CPU-only build" in res.stderr and "SPACY_ELMO_CUDA" in res.stderr
    assert "Traceback" not in res.stderr and "CUDA_HOME environment variable" not in res.stderr
