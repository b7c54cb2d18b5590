"""The ``spacy train`` configs shipped with the package (``ner.cfg``, ``parser.cfg``, ``textcat.cfg``).

``spacy-elmo config NAME OUTPUT`` writes one out; :func:`config_path` finds one.
Reading them needs no spaCy: they are plain text files.
"""

from pathlib import Path
from typing import Tuple

from ..errors import Errors

CONFIG_DIR = Path(__file__).resolve().parent


def config_names() -> Tuple[str, ...]:
    """The names of the shipped configs (file names without ``.cfg``), sorted."""
    return tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.cfg")))


def config_path(name: str) -> Path:
    """The file of the shipped config ``name`` (e.g. ``"ner"``)."""
    path = CONFIG_DIR / f"{name}.cfg"
    if name not in config_names():
        raise ValueError(Errors.E_UNKNOWN_CONFIG.format(name=name, names=", ".join(config_names())))
    return path
