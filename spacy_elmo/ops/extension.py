"""Loading the compiled extension ``spacy_elmo._C`` (once, lazily)."""

import functools
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
        if "undefined symbol" in reason:  # what a build for another torch's ABI fails with
            import torch

            reason = Warnings.W_EXTENSION_OTHER_TORCH.format(reason=reason, torch=torch.__version__)
        warnings.warn(Warnings.W_NO_EXTENSION.format(reason=reason), RuntimeWarning, stacklevel=3)
        return None, reason
    return _C, ""


def fused_available() -> bool:
    """Whether the compiled extension (the fused kernels) is loaded."""
    return load_extension()[0] is not None
