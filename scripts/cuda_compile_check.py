#!/usr/bin/env python3
"""Compile every CUDA source of spacy_elmo._C with the machine's nvcc (compile only, no GPU needed).

* each ``csrc/cuda/*.cu`` is compiled with ``nvcc -c`` for sm_90 (H100/H200) into a
  temporary directory (the .cu files include only the CUDA runtime, fp16/bf16 and
  the project's own headers, so the runtime headers suffice);
* the ATen glue ``csrc/cuda/*.cpp`` is syntax-checked with the host compiler against
  torch's headers when they are importable (a CPU-only torch lacks one generated
  c10/cuda header: a stub is provided for the check). Skip it with ``--no-glue``.

Exit status 0 when everything compiles; otherwise the failing commands and their
compiler output are printed and the status is 1.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    return res.returncode, (res.stdout + res.stderr).strip()


def torch_cxx_std():
    """The C++ standard torch's BuildExtension compiles extensions with (setup.py passes
    none of its own): C++20 where its source names it, else C++17 (older torch, or none)."""
    try:
        import inspect

        import torch.utils.cpp_extension as ce

        return "c++20" if "c++20" in inspect.getsource(ce.BuildExtension) else "c++17"
    except Exception:  # torch missing or its source unavailable
        return "c++17"


def torch_include_flags():
    """-I flags for torch's C++ headers and Python's (what every extension source
    compiles against); raises when torch is not importable."""
    import torch.utils.cpp_extension as ce

    return [f"-I{p}" for p in ce.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]


def report(failures, name, what):
    """Print each failure (source, command, compiler output) and a summary line; the exit status."""
    for rel, cmd, out in failures:
        print(f"\n=== {rel} failed ===\n$ {' '.join(cmd)}\n{out}", file=sys.stderr)
    if failures:
        print(f"\n{name}: {len(failures)} of the {what} failed to compile", file=sys.stderr)
        return 1
    print(f"{name}: all {what} compile")
    return 0


def cuda_include(nvcc):
    home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    for cand in (os.path.join(home, "include"), "/usr/local/cuda/include"):
        if os.path.exists(os.path.join(cand, "cuda_runtime.h")):
            return cand
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    ap.add_argument("--arch", default="90", help="compute capability, e.g. 90 for sm_90")
    ap.add_argument("--no-glue", action="store_true", help="do not syntax-check csrc/cuda/*.cpp")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = ap.parse_args(argv)

    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cu")))
    if not sources:
        print("cuda-check: no .cu sources")
        return 0
    failures = []
    std = f"-std={torch_cxx_std()}"
    with tempfile.TemporaryDirectory(prefix="spacy_elmo_nvcc_") as tmp:
        for src in sources:
            obj = os.path.join(tmp, os.path.basename(src) + ".o")
            cmd = [args.nvcc, std, "-O3", f"-gencode=arch=compute_{args.arch},code=sm_{args.arch}",
                   "-Xcompiler", "-fPIC", "-c", src, "-o", obj]
            code, out = run(cmd)
            rel = os.path.relpath(src, ROOT)
            if code != 0:
                failures.append((rel, cmd, out))
                print(f"FAIL  {rel}")
            else:
                print(f"ok    {rel} (sm_{args.arch}, {std})")

        # the host code that exists only in a CUDA build: the ops' glue, and the bindings' CUDA branch
        glue = sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cpp"))) + [os.path.join(ROOT, "csrc", "bindings.cpp")]
        if glue and not args.no_glue:
            try:
                torch_includes = torch_include_flags()
            except Exception as err:  # torch missing: nothing to check against
                torch_includes = None
                print(f"skip  glue syntax check (torch headers unavailable: {err})")
            inc = cuda_include(args.nvcc)
            if torch_includes is not None and inc is not None:
                stub = os.path.join(tmp, "stub", "c10", "cuda", "impl")
                os.makedirs(stub)
                with open(os.path.join(stub, "cuda_cmake_macros.h"), "w") as fh:
                    fh.write("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
                flags = [std, "-fsyntax-only", "-DSPACY_ELMO_WITH_CUDA", "-DTORCH_EXTENSION_NAME=_C"]
                incs = [*torch_includes, f"-I{inc}"]
                incs.append(f"-idirafter{os.path.join(tmp, 'stub')}")
                for src in glue:
                    cmd = [args.cxx, *flags, *incs, src]
                    code, out = run(cmd)
                    rel = os.path.relpath(src, ROOT)
                    if code != 0:
                        failures.append((rel, cmd, out))
                        print(f"FAIL  {rel} (host syntax check)")
                    else:
                        print(f"ok    {rel} (host syntax check against torch headers)")
    return report(failures, "cuda-check", "CUDA sources")


if __name__ == "__main__":
    sys.exit(main())
