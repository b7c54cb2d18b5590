"""Models with their softmax and vocabulary: reading and writing model directories.

A pretrained model directory is a native BiLM directory (``config.json`` +
``model.safetensors``) whose safetensors also hold ``softmax.weight (V, P)`` and
``softmax.bias (V,)``, plus ``vocab.txt`` (V lines). ``BiLM.load`` reads it and
ignores the softmax. An AllenNLP directory (options + hdf5) may carry
``softmax.safetensors`` (``softmax.weight``, ``softmax.bias``; not an hdf5 file, so
the directory still holds exactly one) and ``vocab.txt`` (both written by
``spacy-elmo export --format allennlp``).
"""

from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import torch

from ..bilm import BiLM
from ..bilm.native_io import (
    CONFIG_NAME,
    load_tensors,
    model_from_native,
    read_meta,
    read_safetensors,
    resolve_model_dir,
    write_safetensors,
)
from ..errors import Errors
from .softmax import SoftmaxLayer
from .vocab import Vocab

PathLike = Union[str, Path]
SOFTMAX_FILE = "softmax.safetensors"


def save_pretrained(
    directory: PathLike,
    bilm: BiLM,
    softmax: Optional[SoftmaxLayer],
    vocab: Optional[Vocab],
    provenance: Dict[str, Any],
    dtype: Optional[torch.dtype] = None,
) -> None:
    """Write model, softmax (extra tensors) and vocab.txt; config.json is written last.

    dtype: store floating tensors in this dtype (torch.float16 for a compact bundle).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if vocab is not None:
        vocab.save(directory)
    extra = None
    if softmax is not None:
        extra = {"softmax.weight": softmax.weight.detach(), "softmax.bias": softmax.bias.detach()}
    bilm.save(directory, extra_tensors=extra, dtype=dtype, provenance=provenance)


def load_pretrained(
    directory: PathLike, backend: str = "auto"
) -> Tuple[BiLM, Optional[SoftmaxLayer], Optional[Vocab], Dict[str, Any]]:
    """``(bilm, softmax or None, vocab or None, provenance)`` of a model directory or ``"default"``."""
    path = resolve_model_dir(directory)
    provenance: Dict[str, Any] = {}
    weight = bias = None
    if (path / CONFIG_NAME).exists():  # native: config.json and the tensors are read once
        meta, tensors = read_meta(path), load_tensors(path)
        bilm = model_from_native(BiLM, path, meta, tensors, backend=backend)
        provenance = meta.get("provenance", {}) or {}
        weight, bias = tensors.get("softmax.weight"), tensors.get("softmax.bias")
    else:
        bilm = BiLM.load(path, backend=backend)
        if (path / SOFTMAX_FILE).exists():
            tensors = read_safetensors(path / SOFTMAX_FILE)
            weight, bias = tensors.get("softmax.weight"), tensors.get("softmax.bias")
    softmax = vocab = None
    if weight is not None and bias is not None:
        vocab = Vocab.load(path)
        if len(vocab) != weight.shape[0]:
            raise ValueError(Errors.E_VOCAB_SIZE_MISMATCH.format(path=path, n_vocab=len(vocab), n_softmax=weight.shape[0]))
        softmax = SoftmaxLayer(weight.shape[0], weight.shape[1])
        with torch.no_grad():
            softmax.weight.copy_(weight.float())
            softmax.bias.copy_(bias.float())
    return bilm, softmax, vocab, provenance


def write_softmax(path: PathLike, softmax: SoftmaxLayer) -> None:
    """The softmax alone, beside exported AllenNLP weights."""
    write_safetensors({"softmax.weight": softmax.weight.detach().cpu().float().contiguous(),
                       "softmax.bias": softmax.bias.detach().cpu().float().contiguous()}, path)
