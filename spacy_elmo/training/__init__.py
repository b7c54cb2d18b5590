"""Pretraining and fine-tuning ELMo biLMs (the bilm-tf recipe, elmo-spec §8).

Layering: only :mod:`.data` (and only inside its tokenizing functions) imports
spaCy; the model, loss, sampler and trainer are plain PyTorch so they run on
machines without spaCy.
"""

from .vocab import BOS, EOS, UNK, SPECIALS, Vocab

__all__ = ["BOS", "EOS", "UNK", "SPECIALS", "Vocab"]
