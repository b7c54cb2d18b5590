"""Loading the compiled extension ``spacy_elmo._C`` (once, lazily)."""

import dataclasses
import functools
import importlib.util
import os
import sys
import warnings
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from .. import switches
from ..errors import Warnings


@functools.lru_cache(maxsize=None)
def load_extension() -> Tuple[Optional[ModuleType], str]:
    """Return ``(module, "")`` when the extension imports, else ``(None, reason)``.

    Warns once (not per call) when it is missing: the package still works on
    the pure-PyTorch reference path.
    """
    try:
        from .. import _C  # type: ignore[attr-defined]
    except ImportError as err:
        reason = str(err) or type(err).__name__
        # What a build for another torch's ABI fails with: glibc's loader says "undefined symbol",
        # macOS's dyld "symbol not found" (in flat namespace) / "Symbol not found".
        if "undefined symbol" in reason or "symbol not found" in reason.lower():
            import torch

            reason = Warnings.W_EXTENSION_OTHER_TORCH.format(reason=reason, torch=torch.__version__)
        elif sys.platform == "win32":  # setup.py builds none there
            reason = Warnings.W_NOT_BUILT_ON_WINDOWS.format(reason=reason)
        elif built_file() is None:  # Python's "cannot import name '_C'" says nothing of why
            reason = Warnings.W_EXTENSION_NOT_BUILT.format(folder=os.path.dirname(os.path.dirname(__file__)))
        warnings.warn(Warnings.W_NO_EXTENSION.format(reason=reason, fix=extension_fix()), RuntimeWarning,
                      stacklevel=3)
        return None, reason
    switches.read(switches.CPU_ISA)  # warns for a value the kernel dispatch does not take (it runs base)
    return _C, ""


def built_file() -> Optional[str]:
    """The file of spacy_elmo._C that an import would load (found, not loaded), or None where there is none:
    the install built none (SPACY_ELMO_NO_EXTENSION=1, Windows) or the checkout was never built."""
    try:
        spec = importlib.util.find_spec(f"{__package__.rsplit('.', 1)[0]}._C")
    except (ImportError, ValueError):
        return None
    return None if spec is None else spec.origin


def extension_fix() -> str:
    """How to get the extension on this platform (the {fix} of the messages that say it is missing)."""
    return Warnings.W_FIX_WINDOWS if sys.platform == "win32" else Warnings.W_FIX_BUILD


def fused_available() -> bool:
    """Whether the compiled extension (the fused kernels) is loaded."""
    return load_extension()[0] is not None


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """What the compiled extension of this install is (:func:`build_info`); the build facts are None
    (``cuda_archs`` empty) where it did not load."""

    extension: bool  #: whether spacy_elmo._C loaded (else the reference path runs)
    reason: str  #: why it did not load ("" where it did)
    fix: str  #: how to get it (:func:`extension_fix`; "" where it loaded)
    cpu_isa: Optional[str]  #: the CPU kernel table in use: base, avx2 or avx512
    cpu_isa_supported: Optional[str]  #: the widest table this CPU runs
    cpu_isa_cap: Optional[str]  #: SPACY_ELMO_CPU_ISA, which caps cpu_isa (None: unset; a value not named base,
    #: avx2 or avx512, "" included, means base: spacy_elmo.switches), as this process's environment holds it now
    openmp: Optional[bool]  #: compiled with OpenMP (without: the kernels' own loops run on one thread)
    openmp_version: Optional[int]  #: the compiler's _OPENMP (e.g. 201511, OpenMP 4.5); None without
    cuda: Optional[bool]  #: the CUDA kernels compiled in
    cuda_archs: List[str]  #: the virtual architectures (PTX targets, nvcc's __CUDA_ARCH_LIST__), e.g. ["7.5", "9.0"]

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def cuda_archs(arch_list: str) -> List[str]:
    """nvcc's ``__CUDA_ARCH_LIST__`` ("750,900") as compute capabilities (["7.5", "9.0"])."""
    return [f"{int(a) // 100}.{int(a) % 100 // 10}" for a in arch_list.split(",") if a.strip()]


def build_info() -> BuildInfo:
    """The extension's build facts (``spacy-elmo info`` prints them): whether it loaded (if not, why
    and the fix), the CPU kernel variant the run-time dispatch picked and the widest this CPU runs,
    OpenMP, and the CUDA kernels' architectures. Loads the extension (:func:`load_extension`) if
    nothing has yet."""
    module, reason = load_extension()
    cap = os.environ.get(switches.CPU_ISA)
    if module is None:
        return BuildInfo(False, reason, extension_fix(), None, None, cap, None, None, None, [])
    if not hasattr(module, "build_info"):  # built before build_info() existed: it loads, its facts are unknown
        return BuildInfo(True, Warnings.W_INFO_STALE_EXTENSION.format(fix=extension_fix()), extension_fix(), None,
                         None, cap, None, None, None, [])
    facts = module.build_info()
    openmp = int(facts["openmp"])
    return BuildInfo(True, "", "", str(facts["cpu_isa"]), str(facts["cpu_isa_supported"]), cap, openmp > 0,
                     openmp or None, bool(facts["cuda"]), cuda_archs(str(facts["cuda_arch_list"])))
