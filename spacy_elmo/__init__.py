"""spacy-elmo: ELMo contextual word vectors, exact and fast, for PyTorch and spaCy.

The torch-level API (no spaCy import): :func:`batch_to_ids`, :class:`BiLMConfig`,
:class:`BiLM`, :class:`BiLMOutput`, :class:`ScalarMix`. The spaCy component
``elmo`` is registered through entry points (``spacy_elmo.pipeline``).

The API's names are imported on first use (PEP 562), not with the package: the command line's entry
(``spacy_elmo.__main__``, under the package) then runs before torch is imported, and a Ctrl-C during that
import (1-2 s) ends the command with one line instead of a traceback.
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ gives, for type checkers
    from .bilm import BiLM, BiLMConfig, BiLMOutput, ScalarMix
    from .chars import batch_to_ids

__version__ = "0.1.0"  # also the distribution's version (pyproject.toml reads it)
__all__ = ["batch_to_ids", "BiLMConfig", "BiLM", "BiLMOutput", "ScalarMix", "__version__"]

#: Each name of the API: the module it is imported from on first use.
_API = {"batch_to_ids": ".chars", "BiLMConfig": ".bilm", "BiLM": ".bilm", "BiLMOutput": ".bilm", "ScalarMix": ".bilm"}


if not TYPE_CHECKING:  # hidden from mypy, which took it as giving any name (spacy_elmo._C, a typo) as Any

    def __getattr__(name: str) -> Any:
        if name in _API:
            value = getattr(importlib.import_module(_API[name], __name__), name)
        # public submodules only: a private one (_C, the extension) stays an AttributeError for hasattr() probes,
        # and a dotted name is no attribute (find_spec would import its parent)
        elif name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            value = importlib.import_module(f"{__name__}.{name}")  # spacy_elmo.bilm etc., as an eager package gave
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # imported once: later lookups do not come here
        return value

    def __dir__() -> list:
        """The module's names and the API's not yet imported (help(), tab completion), without importing them."""
        return sorted(set(globals()) | set(_API))
