"""Weight loading: the initialize-time ``@misc`` loader and the shared load function."""

from pathlib import Path
from typing import Callable, Optional, Tuple, Union

from ..bilm import BiLM

#: ``loader(backend) -> (BiLM, source)``
WeightsLoader = Callable[[str], Tuple[BiLM, str]]


def load_weights(path: Optional[Union[str, Path]], backend: str = "auto") -> Tuple[BiLM, str]:
    """Load a native directory, an AllenNLP directory, or the bundled default ("" / None / "default").

    Returns the biLM in eval mode and a description of the source.
    Raises FileNotFoundError when no default model is installed.
    """
    target = "default" if path is None or str(path).strip() in ("", "default") else str(path)
    bilm = BiLM.load(target, stateful=False, backend=backend).eval()
    return bilm, target


def weights_loader(path: Optional[str] = "") -> WeightsLoader:
    """``[initialize.components.elmo.weights_loader]``: ``@misc = "spacy_elmo.WeightsLoader.v1"``.

    path: a directory written by ``BiLM.save``, a directory with one AllenNLP
    ``options.json`` + ``.hdf5``, or empty for the bundled default model.
    """

    def load(backend: str = "auto") -> Tuple[BiLM, str]:
        return load_weights(path, backend)

    return load
