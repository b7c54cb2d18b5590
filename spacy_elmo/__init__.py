"""spacy-elmo: ELMo contextual word vectors, exact and fast, for PyTorch and spaCy.

The torch-level API (no spaCy import): :func:`batch_to_ids`, :class:`BiLMConfig`,
:class:`BiLM`, :class:`BiLMOutput`, :class:`ScalarMix`. The spaCy component
``elmo`` is registered through entry points (``spacy_elmo.pipeline``).
"""

from .bilm import BiLM, BiLMConfig, BiLMOutput, ScalarMix
from .chars import batch_to_ids

__version__ = "0.1.0"  # also the distribution's version (pyproject.toml reads it)
__all__ = ["batch_to_ids", "BiLMConfig", "BiLM", "BiLMOutput", "ScalarMix", "__version__"]
