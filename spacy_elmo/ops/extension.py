"""Loading the compiled extension ``spacy_elmo._C`` (once, lazily)."""

import functools
import sys
import warnings
from types import ModuleType
from typing import Optional, Tuple

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
        warnings.warn(Warnings.W_NO_EXTENSION.format(reason=reason, fix=extension_fix()), RuntimeWarning,
                      stacklevel=3)
        return None, reason
    return _C, ""


def extension_fix() -> str:
    """How to get the extension on this platform (the {fix} of the messages that say it is missing)."""
    return Warnings.W_FIX_WINDOWS if sys.platform == "win32" else Warnings.W_FIX_BUILD


def fused_available() -> bool:
    """Whether the compiled extension (the fused kernels) is loaded."""
    return load_extension()[0] is not None
