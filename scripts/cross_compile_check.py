#!/usr/bin/env python3
"""Compile every C++ source of spacy_elmo._C for aarch64 Linux and macOS with zig's clang (compile only).

Each ``csrc/*.cpp`` and ``csrc/cpu/*.cpp`` is compiled to an object with
``python -m ziglang c++ -target T`` (the ``ziglang`` package: clang with the target's
C and C++ headers) into a temporary directory, with the flags setup.py would use on
that platform (build_flags.flags_for) and the C++ standard torch's BuildExtension adds:

* ``aarch64-linux-gnu``: the Linux flags (``-fopenmp``);
* ``aarch64-macos`` and ``x86_64-macos``: Apple clang's, with torch's libomp
  (``-Xpreprocessor -fopenmp``, what a torch wheel from pypi.org gives) and without
  OpenMP (a torch without libomp).

Against the installed torch's headers and this Python's: their generated headers
(ATen/Config.h, pyconfig.h) are this machine's, standing in for the target's, which
differ in nothing the sources use. The OpenMP variants read the omp.h of torch's
include directory or of the host C++ compiler (``$CXX``, else c++); without either
they fail (a variant not compiled is no pass). Nothing is linked and nothing runs: this proves the sources
compile there, not that the kernels are right there.

Exit status 0 when everything compiles; otherwise the failing commands and their
compiler output are printed and the status is 1.
"""

import argparse
import concurrent.futures
import glob
import os
import shutil
import sys
import tempfile
import time

from cuda_compile_check import ROOT, report, run, torch_cxx_std, torch_include_flags

sys.path.insert(0, ROOT)
import build_flags  # noqa: E402  (beside setup.py)

# (zig target, platform.system() there, whether torch's libomp is there)
VARIANTS = [
    ("aarch64-linux-gnu", "Linux", False),
    ("aarch64-macos", "Darwin", True),
    ("aarch64-macos", "Darwin", False),
    ("x86_64-macos", "Darwin", True),
    ("x86_64-macos", "Darwin", False),
]


def host_omp_h(cxx):
    """An omp.h: torch's (its macOS wheels ship one), else the host compiler's
    (GCC's libgomp header); None when neither has one."""
    import torch.utils.cpp_extension as ce

    for inc in ce.include_paths():
        if os.path.exists(os.path.join(inc, "omp.h")):
            return os.path.join(inc, "omp.h")
    try:  # the dependency list of an empty file that includes omp.h names its path
        code, out = run([*cxx, "-fopenmp", "-M", "-include", "omp.h", "-x", "c++", os.devnull])
    except OSError:  # no host compiler
        return None
    found = [tok for tok in out.split() if os.path.basename(tok) == "omp.h"]
    return found[0] if code == 0 and found else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="*", help="only these zig targets (default: all)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)

    try:
        import ziglang  # noqa: F401
    except ImportError:
        print("cross-check: the ziglang package is missing: pip install ziglang (the test extra has it)",
              file=sys.stderr)
        return 1
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "*.cpp")) + glob.glob(os.path.join(ROOT, "csrc", "cpu", "*.cpp")))
    std = f"-std={torch_cxx_std()}"
    incs = torch_include_flags()
    omp_h = host_omp_h(build_flags.host_cxx())
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_cross_") as tmp:
        omp_inc = None
        if omp_h is not None:  # that header alone (the host compiler's directory has its x86 headers too)
            omp_inc = os.path.join(tmp, "omp")
            os.makedirs(omp_inc)
            shutil.copy(omp_h, omp_inc)
        # zig's caches in the temporary directory (its probes' and compiles'): every run starts cold
        os.environ["ZIG_GLOBAL_CACHE_DIR"] = os.path.join(tmp, "zig-global")
        os.environ["ZIG_LOCAL_CACHE_DIR"] = os.path.join(tmp, "zig-local")
        jobs, failures = [], []
        for target, system, libomp in VARIANTS:
            if args.targets and target not in args.targets:
                continue
            zig = [sys.executable, "-m", "ziglang", "c++", "-target", target]
            flags = build_flags.flags_for(system, "<torch>/lib" if libomp else None,
                                          lambda flag: build_flags.compiler_accepts(zig, flag))
            label = f"{target}, {flags.openmp}"
            extra = []
            if flags.openmp in ("openmp", "libomp"):
                if omp_inc is None:  # a variant not compiled is not a pass
                    missing = "no omp.h in torch's include directory or the host compiler's"
                    failures.append((f"every source ({label})", [], f"{missing}: install the host compiler's "
                                     "OpenMP headers (libgomp)"))
                    print(f"FAIL  {label}: {missing}")
                    continue
                extra = [f"-idirafter{omp_inc}"]
            for src in sources:
                obj = os.path.join(tmp, f"{target}-{flags.openmp}-{os.path.basename(src)}.o")
                jobs.append((os.path.relpath(src, ROOT), label,
                             # the defines torch's BuildExtension adds to every source of spacy_elmo._C
                             [*zig, std, *flags.cxx, "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H",
                              "-DTORCH_EXTENSION_NAME=_C", *incs, *extra, "-c", src, "-o", obj]))

        def compile_one(job):
            rel, label, cmd = job
            return (rel, label, cmd, *run(cmd))

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for rel, label, cmd, code, out in pool.map(compile_one, jobs):
                if code != 0:
                    failures.append((f"{rel} ({label})", cmd, out))
                    print(f"FAIL  {rel} ({label})")
                else:
                    print(f"ok    {rel} ({label}, {std})")
    print(f"cross-check: {len(jobs)} compiles in {time.monotonic() - start:.0f} s")
    return report(failures, "cross-check", "C++ sources")


if __name__ == "__main__":
    sys.exit(main())
