"""Loading a biLM program that ``torch.export.save`` wrote, in a fresh process."""

import os
from typing import Union

import torch

from .. import ops
from ..errors import Errors
from .model import BiLMOutput  # noqa: F401  its module registers it with torch's pytree by name


def load_exported(path: Union[str, "os.PathLike[str]"]) -> "torch.export.ExportedProgram":
    """``torch.export.load(path)`` with what the program needs registered first: the fused kernels
    (``torch.ops.spacy_elmo.*``, which a biLM exported with the fused backend calls; a reference-backend
    program calls none) and the output type ``BiLMOutput`` (its structure is saved by name).
    ``.module()(ids)`` of the result returns a ``BiLMOutput``.

    Raises RuntimeError (:attr:`Errors.E_EXPORTED_NEEDS_FUSED`) where torch cannot read the program and
    the compiled extension is missing."""
    if ops.fused_available():
        ops.implementation("fused")  # importing spacy_elmo.ops.fused registers the kernels
        return torch.export.load(path)
    try:
        return torch.export.load(path)
    except RuntimeError as err:  # torch names the unknown operator only in its log, not in the error
        raise RuntimeError(
            Errors.E_EXPORTED_NEEDS_FUSED.format(
                path=path, error=err, reason=ops.load_extension()[1], fix=ops.extension_fix()
            )
        ) from err
