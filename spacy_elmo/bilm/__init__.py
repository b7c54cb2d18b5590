"""The biLM as torch modules (never imports spaCy)."""

from .config import BiLMConfig
from .exported import load_exported
from .model import BiLM, BiLMOutput
from .scalar_mix import ScalarMix

__all__ = ["BiLMConfig", "BiLM", "BiLMOutput", "ScalarMix", "load_exported"]
