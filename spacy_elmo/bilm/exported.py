"""Loading a biLM program that ``torch.export.save`` wrote, in a fresh process."""

import os
import zipfile
from typing import Union

import torch

from .. import ops
from ..errors import Errors
from ..paths import refuse_empty_path
from .model import BiLMOutput  # noqa: F401  its module registers it with torch's pytree by name

#: How a program's graph (its ``models/*.json`` in the archive) names an operator of spacy_elmo._C.
FUSED_TARGET = b"torch.ops.spacy_elmo."


def calls_fused_ops(path: Union[str, "os.PathLike[str]"]) -> bool:
    """Whether the program saved at ``path`` calls the fused kernels (a biLM exported with the fused backend);
    False for one that does not, and for a file that is no readable archive (torch's own error then says so)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(
                FUSED_TARGET in archive.read(info)
                for info in archive.infolist()
                if info.filename.endswith(".json") and "/models/" in f"/{info.filename}"
            )
    except (OSError, zipfile.BadZipFile, EOFError, RuntimeError):  # RuntimeError: an encrypted member
        return False


def load_exported(path: Union[str, "os.PathLike[str]"]) -> "torch.export.ExportedProgram":
    """``torch.export.load(path)`` with what the program needs registered first: the fused kernels
    (``torch.ops.spacy_elmo.*``, which a biLM exported with the fused backend calls; a reference-backend
    program calls none) and the output type ``BiLMOutput`` (its structure is saved by name).
    ``.module()(ids)`` of the result returns a ``BiLMOutput``.

    Raises RuntimeError (:attr:`Errors.E_EXPORTED_NEEDS_FUSED`) for a program that calls the fused kernels
    where the compiled extension is missing (torch's own error names no cause, only its log does), and
    ValueError for an empty path (:func:`spacy_elmo.paths.refuse_empty_path`)."""
    refuse_empty_path(path, Errors.E_PATH_EMPTY_EXPORTED)
    if ops.fused_available():
        ops.implementation("fused")  # importing spacy_elmo.ops.fused registers the kernels
    elif calls_fused_ops(path):
        raise RuntimeError(
            Errors.E_EXPORTED_NEEDS_FUSED.format(path=path, reason=ops.load_extension()[1], fix=ops.extension_fix())
        )
    return torch.export.load(path)
