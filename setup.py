"""Build of the compiled extension ``spacy_elmo._C``.

All metadata lives in pyproject.toml; this file only declares the extension.
Install with ``pip install --no-build-isolation -e .`` after installing torch and the build tools
(pyproject's [build-system] requires; a bare ``torch`` requirement in an isolated build would pull a CUDA wheel).

Environment switches (read and checked by spacy_elmo/switches.py, through build_flags.py: another
value warns and runs the default):
  SPACY_ELMO_NO_EXTENSION=0|1   1: build nothing (pure-PyTorch reference path only); unset: 0
  SPACY_ELMO_CUDA=0|1|auto      CUDA kernels: never, always, or when torch has CUDA and nvcc exists; unset: auto

The compiler and linker flags per platform (Linux, macOS with or without torch's
libomp, no extension on Windows) come from build_flags.py beside this file.
"""

import glob
import os
import sys

import setuptools
from setuptools import setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_flags  # noqa: E402  (beside this file; the package itself may not import yet)

# Before setup(): an older setuptools stops inside it on pyproject's license field, with a schema error
# that names no fix.
_problem = build_flags.setuptools_problem(setuptools.__version__)
if _problem:
    sys.exit(_problem)


def _extensions():
    if build_flags.switches.read(build_flags.switches.NO_EXTENSION) == "1":
        return [], {}
    torch = build_flags.import_torch()  # without torch: stops, saying how to install it

    flags = build_flags.host_flags(os.path.dirname(torch.__file__))
    if flags.message:
        print(flags.message, file=sys.stderr)
    if not flags.build:
        return [], {}
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

    sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp"))
    if not sources:
        return [], {}
    cuda_sources = sorted(glob.glob("csrc/cuda/*.cu") + glob.glob("csrc/cuda/*.cpp"))
    use_cuda, problem = build_flags.cuda_choice(build_flags.switches.read(build_flags.switches.CUDA), torch.__version__,
                                                torch.version.cuda, CUDA_HOME) if cuda_sources else (False, "")
    if problem:
        sys.exit(problem)
    cxx_flags = flags.cxx
    define_macros = [("SPACY_ELMO_WITH_CUDA", "1")] if use_cuda else []
    if use_cuda:
        nvcc_flags = ["-O3"]  # no --use_fast_math: exactness first
        ext = CUDAExtension(
            "spacy_elmo._C",
            sources + cuda_sources,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
            define_macros=define_macros,
            extra_link_args=flags.link,
        )
    else:
        ext = CppExtension(
            "spacy_elmo._C",
            sources,
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=flags.link,
        )

    class BuildExt(BuildExtension.with_options(use_ninja=True)):
        def build_extensions(self):
            # Asked only when compiling (egg_info and sdist need no compiler): without one, torch's ninja
            # build fails with a traceback that names no fix.
            problem = build_flags.compiler_problem()
            if problem:
                sys.exit(problem)
            super().build_extensions()

    return [ext], {"build_ext": BuildExt}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
