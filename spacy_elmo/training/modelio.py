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
from typing import Any, Collection, Dict, Optional, Tuple

import torch

from .._typing import PathLike
from ..atomic import make_dirs
from ..bilm import BiLM
from ..bilm.native_io import (
    WEIGHTS_NAME,
    ModelPathIsFile,
    NativeDirMissing,
    allennlp_files_of,
    cast_for_save,
    check_weight,
    load_tensors,
    model_from_native,
    model_path,
    read_meta,
    read_safetensors,
    safetensors_names,
    safetensors_shapes,
    write_safetensors,
)
from ..errors import Errors
from ..paths import refuse_empty_path
from .softmax import SoftmaxLayer
from .vocab import Vocab

SOFTMAX_FILE = "softmax.safetensors"


def save_pretrained(
    directory: PathLike,
    bilm: BiLM,
    softmax: Optional[SoftmaxLayer],
    vocab: Optional[Vocab],
    provenance: Dict[str, Any],
    dtype: Optional[torch.dtype] = None,
    initial_state=None,
) -> None:
    """Write model, softmax (extra tensors) and vocab.txt; config.json is written last.

    dtype: store floating tensors in this dtype (torch.float16 for a compact bundle);
    initial_state: ``(h, c)`` saved instead of the biLM's own (None: its own).
    """
    refuse_empty_path(directory, Errors.E_PATH_EMPTY_MODEL_DIR)  # before vocab.txt is written into the current one
    directory = Path(directory)
    make_dirs(directory)
    if vocab is not None:
        vocab.save(directory)
    extra = None
    if softmax is not None:
        extra = {"softmax.weight": softmax.weight.detach(), "softmax.bias": softmax.bias.detach()}
    bilm.save(directory, extra_tensors=extra, dtype=dtype, provenance=provenance, initial_state=initial_state)


def load_pretrained(
    directory: PathLike, backend: str = "auto"
) -> Tuple[BiLM, Optional[SoftmaxLayer], Optional[Vocab], Dict[str, Any]]:
    """``(bilm, softmax or None, vocab or None, provenance)`` of a model directory or ``"default"``."""
    path = model_path(directory)
    provenance: Dict[str, Any] = {}
    tensors: Dict[str, torch.Tensor] = {}
    found = allennlp_files_of(path)
    source = softmax_source(path, found)
    if found is None:  # native: config.json and the tensors are read once
        meta, tensors = read_meta(path), load_tensors(path)
        bilm = model_from_native(BiLM, path, meta, tensors, backend=backend)
        provenance = dict(bilm.provenance)  # as BiLM.load takes it: {} where config.json's is no object
    else:
        bilm = BiLM.from_allennlp(found[0], found[1], backend=backend)
        if source is not None:
            tensors = read_safetensors(source)
    weight, bias = softmax_tensors(tensors, source, bilm.config.projection_dim)
    softmax = vocab = None
    if weight is not None:
        vocab = softmax_vocab(path, weight.shape[0])
        softmax = SoftmaxLayer(weight.shape[0], weight.shape[1])
        with torch.no_grad():
            softmax.weight.copy_(weight.float())
            softmax.bias.copy_(bias.float())
    return bilm, softmax, vocab, provenance


SOFTMAX_NAMES = ("softmax.weight", "softmax.bias")


def softmax_vocab(path: Path, n_rows: int) -> Vocab:
    """The vocab.txt of the model directory ``path``, whose softmax has ``n_rows`` rows: an error where it is
    missing, unreadable (:meth:`Vocab.load`) or not one token per row."""
    vocab = Vocab.load(path)
    if len(vocab) != n_rows:
        raise ValueError(Errors.E_VOCAB_SIZE_MISMATCH.format(path=path, n_vocab=len(vocab), n_softmax=n_rows))
    return vocab


def check_init_model(directory: PathLike) -> None:
    """Refuse, reading the safetensors headers and vocab.txt alone, what :func:`load_pretrained` would refuse of
    the ``pretrain --init`` model ``directory`` before its weights: :func:`has_softmax`'s errors and, with a
    softmax, a vocab.txt that is missing or not one token per softmax row (:func:`softmax_vocab`). pretrain
    checks it before OUTPUT_DIR is made and the corpus tokenized (it was refused only after). A file given as
    ``--init`` is refused advising its directory (not BiLM's Python loaders)."""
    try:
        softmax = has_softmax(directory)
    except ModelPathIsFile as err:
        raise err.advising(Errors.E_MODEL_PATH_FIX_INIT) from None
    except NativeDirMissing as err:
        raise err.advising_cli() from None
    if not softmax:
        return
    path = model_path(directory)
    source = softmax_source(path, allennlp_files_of(path))
    assert source is not None  # has_softmax found the tensors in it
    shape = safetensors_shapes(source)["softmax.weight"]
    if len(shape) == 2:  # another shape is load_pretrained's error (softmax_tensors), with the weights read
        softmax_vocab(path, shape[0])


def softmax_source(path: Path, allennlp_files) -> Optional[Path]:
    """The file of model directory ``path`` that holds its softmax tensors if it has any: its
    ``model.safetensors``, or with AllenNLP weights (``allennlp_files``: :func:`allennlp_files_of`'s)
    the ``softmax.safetensors`` beside them (None when there is none: no softmax)."""
    if allennlp_files is None:
        return path / WEIGHTS_NAME
    source = path / SOFTMAX_FILE
    return source if source.exists() else None


def has_softmax_tensors(names: Collection[str], source: Optional[Path]) -> bool:
    """Whether tensor ``names`` (of file ``source``) hold a softmax: both of :data:`SOFTMAX_NAMES`, or
    neither; one without the other is an error."""
    present = [name for name in SOFTMAX_NAMES if name in names]
    if len(present) == 1:
        missing = next(name for name in SOFTMAX_NAMES if name not in names)
        raise ValueError(Errors.E_SOFTMAX_INCOMPLETE.format(path=source, found=present[0], missing=missing))
    return bool(present)


def has_softmax(directory: PathLike) -> bool:
    """Whether the model in ``directory`` (or ``"default"``) has a softmax, as :func:`load_pretrained`
    would find it, read from the safetensors header alone: no weights are loaded. Its errors: a
    model that is missing, or a directory or softmax file that :func:`load_pretrained` would refuse
    before reading a tensor."""
    path = model_path(directory)
    found = allennlp_files_of(path)
    source = softmax_source(path, found)
    if found is None:  # native: what load_pretrained reads before any tensor
        read_meta(path)
        if source is None or not source.exists():
            raise NativeDirMissing.of(path, WEIGHTS_NAME)
    return source is not None and has_softmax_tensors(safetensors_names(source), source)


def recorded_reading(directory: PathLike) -> Optional[str]:
    """How the model in ``directory`` (or ``"default"``) was trained to read text, as its provenance records it
    (``"sentences"``: ``pretrain --sentences``; ``"streams"``), from its config.json alone; None where nothing
    records it (AllenNLP files, a ``BiLM.save`` directory)."""
    path = model_path(directory)
    if allennlp_files_of(path) is not None:
        return None
    provenance = read_meta(path).get("provenance")
    # one that is no object (hand-edited, another tool's) records nothing, as BiLM.load takes it
    return provenance.get("reading") if isinstance(provenance, dict) else None


def softmax_tensors(tensors: Dict[str, torch.Tensor], source: Optional[Path], P: int):
    """``(weight (V, P), bias (V,))`` of a model's tensors, or ``(None, None)`` when it has no softmax;
    clear errors when one of them is missing or their shapes, dtypes or values cannot be a softmax."""
    if not has_softmax_tensors(tensors, source):
        return None, None
    assert source is not None  # the tensors were read from it
    weight, bias = tensors["softmax.weight"], tensors["softmax.bias"]
    if weight.dim() != 2 or weight.shape[1] != P or tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(
            Errors.E_SOFTMAX_SHAPE.format(path=source, weight=tuple(weight.shape), bias=tuple(bias.shape), P=P)
        )
    for name in SOFTMAX_NAMES:
        check_weight(tensors[name], name, source, Errors.E_NATIVE_TENSOR_DTYPE)
    return weight, bias


def write_softmax(path: PathLike, softmax: SoftmaxLayer) -> None:
    """The softmax alone, beside exported AllenNLP weights."""
    fix = Errors.E_SAVE_DTYPE_OVERFLOW_ALLENNLP
    write_safetensors({name: cast_for_save(name, value.detach().cpu(), torch.float32, fix).contiguous()
                       for name, value in (("softmax.weight", softmax.weight), ("softmax.bias", softmax.bias))}, path)
