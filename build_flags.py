"""Compiler and linker flags of spacy_elmo._C for one platform.

One place for them, read by setup.py (which builds the extension) and by
scripts/cross_compile_check.py (which compiles every source for aarch64 Linux and
macOS with zig's clang). setup.py runs before the package is importable, so this
module sits beside it (the sdist carries it: MANIFEST.in) and imports nothing of
spacy_elmo but its messages, read from spacy_elmo/errors.py by path (stdlib only).

* Linux (x86-64, aarch64, ...): GCC or clang with OpenMP, as always. Linked with torch's own
  GNU OpenMP runtime where its wheel ships one under a name of its own (pypi's aarch64 wheels:
  ``torch.libs/libgomp-HASH.so.1.0.0``): ``-fopenmp`` would link the system's ``libgomp.so.1``, a
  second runtime in the process, whose thread teams ignore ``torch.set_num_threads``
  (pytorch/pytorch#166087 is the same for torch.compile's kernels). Other wheels (x86-64 from torch
  2.9 on, as far as checked: 2.13) ship ``torch/lib/libgomp.so.1``, the name ``-fopenmp`` links: one
  runtime, the flags of every earlier release. x86-64 wheels of about 2.5-2.8 shipped a renamed one too
  (pytorch/pytorch#149422): there the extension links it as well (not tried on x86-64).
* macOS (Apple clang, arm64 and x86-64): Apple clang has no ``-fopenmp``; torch's
  macOS wheels ship LLVM's libomp (``torch/include/omp.h``, ``torch/lib/libomp.dylib``),
  used through ``-Xpreprocessor -fopenmp`` when present. Without it the extension is
  built without OpenMP (``-fopenmp-simd`` where the compiler takes it, so the
  ``#pragma omp simd`` loops stay vectorised): the kernels' own loops run on one
  thread (``at::parallel_for`` is serial without ``_OPENMP``), the matrix products
  they call still use torch's threads.
* Windows: no extension. MSVC cannot compile the GCC vector extensions the kernels
  are written in (csrc/include/kernels_impl.h); the reference path runs.
"""

import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))

# -fno-trapping-math / -fno-math-errno (as PyTorch itself) let the compiler vectorise
# the branch-free exp/tanh/clip loops; neither changes any computed value.
# No -march=native in anything that may become a wheel; no -std: BuildExtension adds
# the standard this torch's headers are written for.
OPTIMISE = ["-O3", "-fno-trapping-math", "-fno-math-errno"]
# Python's sysconfig CFLAGS carry -g, which torch's build puts before these flags: the last -g option wins,
# so -g0 keeps debug info out of _C (21.4 MB with it, under 1 MB without, for a wheel nobody debugs).
# nvcc gets no sysconfig CFLAGS, so the CUDA objects have none either.
NO_DEBUG_INFO = ["-g0"]


class Flags(NamedTuple):
    build: bool  # False: no extension on this platform (message says why)
    cxx: List[str]  # compile flags of the C++ sources
    link: List[str]  # extra link arguments
    openmp: str  # "openmp" (the compiler's), "libomp" (torch's), "simd" (only omp simd), "none"
    message: str  # what setup.py prints about the choice, "" when nothing is worth saying


def _load(name: str):
    """spacy_elmo/NAME.py, loaded from its file as the module ``_spacy_elmo_NAME`` (the package may not
    import yet)."""
    spec = importlib.util.spec_from_file_location(f"_spacy_elmo_{name}", os.path.join(HERE, "spacy_elmo", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_errors = _load("errors")
Errors, Warnings = _errors.Errors, _errors.Warnings
#: spacy_elmo/switches.py (it imports errors.py as ``_spacy_elmo_errors`` when loaded so): setup.py reads
#: SPACY_ELMO_NO_EXTENSION and SPACY_ELMO_CUDA with its read()
switches = _load("switches")


def torch_libomp(torch_dir: str) -> Optional[str]:
    """The lib directory of the libomp a macOS torch wheel ships (``include/omp.h``
    beside ``lib/libomp.dylib``), or None when this torch has none."""
    lib = os.path.join(torch_dir, "lib")
    if os.path.exists(os.path.join(torch_dir, "include", "omp.h")) and os.path.exists(
            os.path.join(lib, "libomp.dylib")):
        return lib
    return None


def torch_gomp(torch_dir: str, maps: str = "/proc/self/maps") -> Optional[str]:
    """The GNU OpenMP runtime torch loaded into this process (setup.py imports torch before it asks)
    where its wheel ships it under a name of its own (auditwheel's ``libgomp-HASH.so*``, in
    ``torch/lib`` or in ``torch.libs`` beside ``torch``), or None: a runtime named ``libgomp.so.1``,
    which ``-fopenmp``'s own link shares, none loaded, or no ``maps`` to read. The loaded file, not a
    file that merely lies there: a copy left by an earlier wheel would be a second runtime again."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            loaded = {line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    real = os.path.realpath(torch_dir)  # maps names files by their real paths (a venv's lib64 is a link)
    folders = (os.path.join(real, "lib"), os.path.join(os.path.dirname(real), "torch.libs"))
    for path in sorted(loaded):
        name = os.path.basename(path)
        if name.startswith("libgomp-") and ".so" in name and os.path.dirname(os.path.realpath(path)) in folders:
            return path
    return None


def compiler_accepts(cxx: List[str], flag: str) -> bool:
    """Whether the C++ compiler ``cxx`` (a command line) compiles an empty file with ``flag``
    (to an object: zig's c++ mishandles -fsyntax-only and input from stdin)."""
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_probe_") as tmp:
        src = os.path.join(tmp, "probe.cpp")
        with open(src, "w"):
            pass
        try:
            res = subprocess.run([*cxx, flag, "-c", src, "-o", os.path.join(tmp, "probe.o")], capture_output=True,
                                 text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
    return res.returncode == 0


def host_cxx() -> List[str]:
    """The C++ compiler torch's BuildExtension compiles with (ninja): $CXX, else ``c++``
    (torch.utils.cpp_extension.get_cxx_compiler)."""
    return shlex.split(os.environ.get("CXX") or "c++")


def import_torch():
    """torch, which the build compiles against; without it, stop with a message that says how to get it
    (instead of a bare ModuleNotFoundError from setup.py)."""
    try:
        import torch
    except ImportError as err:
        sys.exit(Errors.E_BUILD_NO_TORCH.format(error=err))
    return torch


#: pyproject.toml's [build-system] floor: its ``license = "MIT"`` (a PEP 639 expression) is a schema error
#: to an older setuptools, which an install with --no-build-isolation takes from the environment
SETUPTOOLS_MIN = 77


def setuptools_problem(version: str) -> str:
    """The message setup.py stops with when ``version`` (setuptools.__version__) is older than
    :data:`SETUPTOOLS_MIN`, else "" (a version that does not start with a number is not judged)."""
    major = version.split(".")[0]
    if major.isdigit() and int(major) < SETUPTOOLS_MIN:
        return Errors.E_BUILD_OLD_SETUPTOOLS.format(version=version)
    return ""


def cuda_choice(want: str, torch_version: str, torch_cuda: Optional[str],
                cuda_home: Optional[str]) -> Tuple[bool, str]:
    """Whether setup.py builds the CUDA kernels, and the message it stops with instead ("" for none).

    want: SPACY_ELMO_CUDA as switches.read gives it ("0", "1", "auto"); torch_cuda: torch.version.cuda
    (None for a CPU-only torch); cuda_home: torch.utils.cpp_extension.CUDA_HOME (None where torch found
    no toolkit, always for a CPU-only torch). "auto" builds them where both are there; "1" stops where one
    is missing, saying which, where torch's CUDAExtension raised "CUDA_HOME environment variable is not
    set" for both (for a CPU-only torch the toolkit is not what is missing)."""
    if want == "0":
        return False, ""
    if want != "1":
        return torch_cuda is not None and cuda_home is not None, ""
    if torch_cuda is None:
        return False, Errors.E_BUILD_CUDA_CPU_TORCH.format(torch=torch_version)
    if cuda_home is None:
        return False, Errors.E_BUILD_CUDA_NO_TOOLKIT.format(cuda=torch_cuda)
    return True, ""


def compiler_problem(which: Callable[[str], Optional[str]] = shutil.which) -> str:
    """What is wrong with the C++ compiler the build would use (:func:`host_cxx`): "" where ``which``
    (shutil.which, which takes a path too) finds it, else the message setup.py stops with (instead of
    torch's ninja traceback, "c++: not found" deep inside it)."""
    cxx = host_cxx()
    if cxx and which(cxx[0]) is not None:
        return ""
    source = "$CXX" if os.environ.get("CXX") else "the default; set CXX to choose another"
    return Errors.E_BUILD_NO_COMPILER.format(cxx=cxx[0] if cxx else os.environ.get("CXX", ""), source=source)


def flags_for(system: str, libomp_dir: Optional[str], accepts: Callable[[str], bool],
              torch_dir: str = "", gomp: Optional[str] = None) -> Flags:
    """The flags for ``system`` (platform.system(): Linux, Darwin, Windows, ...).

    libomp_dir: torch's libomp (:func:`torch_libomp`), looked at on macOS only;
    accepts(flag): whether the compiler takes a flag (asked only where it decides);
    torch_dir: named in the messages; gomp: torch's renamed libgomp (:func:`torch_gomp`), on Linux."""
    if system == "Windows":
        return Flags(False, [], [], "none", Warnings.W_BUILD_NO_EXTENSION_WINDOWS)
    if system == "Darwin":
        if libomp_dir is not None:
            # omp.h is in torch's include directory, which every extension compiles with.
            return Flags(True, OPTIMISE + ["-Xpreprocessor", "-fopenmp"] + NO_DEBUG_INFO,
                         # the file itself, not -L/-lomp: an LDFLAGS=-L.../homebrew/.../libomp (distutils puts
                         # LDFLAGS first) would link a second OpenMP runtime, and libomp aborts with two loaded
                         [os.path.join(libomp_dir, "libomp.dylib"), f"-Wl,-rpath,{libomp_dir}"], "libomp", "")
        simd = accepts("-fopenmp-simd")
        return Flags(True, OPTIMISE + (["-fopenmp-simd"] if simd else []) + NO_DEBUG_INFO, [],
                     "simd" if simd else "none",
                     Warnings.W_BUILD_NO_OPENMP.format(torch_dir=torch_dir or "?"))
    # Linux and the rest: the compile flags of every earlier release (order included), less the debug info.
    cxx = ["-O3", "-fopenmp", "-fno-trapping-math", "-fno-math-errno"] + NO_DEBUG_INFO
    if gomp is not None:
        # the file itself, not -fopenmp's -lgomp: the extension needs its soname, which names the
        # runtime torch has loaded before it (libtorch_cpu needs it), found again by that name
        return Flags(True, cxx, [gomp], "openmp", "")
    return Flags(True, cxx, ["-fopenmp"], "openmp", "")


def host_flags(torch_dir: str) -> Flags:
    """The flags setup.py builds with on this machine, against the torch in ``torch_dir``."""
    system = platform.system()
    return flags_for(system, torch_libomp(torch_dir) if system == "Darwin" else None,
                     lambda flag: compiler_accepts(host_cxx(), flag), torch_dir,
                     torch_gomp(torch_dir) if system == "Linux" else None)
