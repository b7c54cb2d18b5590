"""Weight loading: the initialize-time ``@misc`` loader and the shared load function."""

import os
from pathlib import Path
from typing import Callable, Optional, Tuple, Union

from ..bilm import BiLM
from ..bilm.native_io import ModelPathIsFile, SavedPipelineGiven
from ..errors import Errors
from ..paths import config_quoted, python_quoted, shell_quoted

#: ``loader(backend) -> (BiLM, source)``
WeightsLoader = Callable[[str], Tuple[BiLM, str]]


def load_weights(path: Optional[Union[str, Path]], backend: str = "auto") -> Tuple[BiLM, str]:
    """Load a native directory, an AllenNLP directory, or the bundled default ("" / None / "default").

    Returns the biLM in eval mode and its source: "default", or the path made absolute (a relative one names
    other weights once the working directory changes, e.g. where a pipeline saving it is sourced).
    Raises FileNotFoundError when no default model is installed; ValueError naming sourcing the component
    for a saved pipeline (a path that names something, unlike a FileNotFoundError, which the component
    words as a setting naming nothing).
    """
    target = weights_target(path)
    try:
        bilm = BiLM.load(target, stateful=False, backend=backend).eval()
    except ModelPathIsFile as err:  # a setting names it: BiLM.from_allennlp is not the fix here
        raise err.advising(Errors.E_MODEL_PATH_FIX_DIR) from None
    except SavedPipelineGiven as err:
        pipeline = err.pipeline
        raise ValueError(Errors.E_WEIGHTS_ARE_PIPELINE.format(
            given=err.given, config_pipeline=config_quoted(pipeline), py_pipeline=python_quoted(pipeline),
            shell_pipeline=shell_quoted(pipeline))) from err
    return bilm, target if target == "default" else os.path.abspath(target.strip())


def weights_target(path: Optional[Union[str, Path]]) -> str:
    """``"default"`` for the bundled model (None, "" or "default", spaces around ignored), else the path as given."""
    return "default" if path is None or str(path).strip() in ("", "default") else str(path)


def weights_loader(path: Optional[str] = "") -> WeightsLoader:
    """``[initialize.components.elmo.weights_loader]``: ``@misc = "spacy_elmo.WeightsLoader.v1"``.

    path: a directory written by ``BiLM.save``, a directory with one AllenNLP
    ``options.json`` + ``.hdf5``, or empty for the component's ``weights`` (the bundled default
    model when that is null too): the loader's ``path`` attribute, which the component reads.
    """

    def load(backend: str = "auto") -> Tuple[BiLM, str]:
        return load_weights(path, backend)

    load.path = path  # type: ignore[attr-defined]
    return load


def names_no_weights(path: Optional[Union[str, Path]]) -> bool:
    """Whether a weights setting (a loader's path, ``[components.NAME] weights``) is empty: null, "" or
    spaces. The one rule for "names no weights" ("default" names the bundled model)."""
    return path is None or not str(path).strip()


def requests_nothing(loader: WeightsLoader) -> bool:
    """Whether ``loader`` is this package's ``WeightsLoader.v1`` given an empty path (:func:`names_no_weights`:
    ``paths.elmo`` left out of a shipped config): it names no weights of its own."""
    return hasattr(loader, "path") and names_no_weights(loader.path)
