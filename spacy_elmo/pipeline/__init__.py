"""spaCy integration: the ``elmo`` component, listeners, ScalarMix (imports spaCy and thinc).

Registered through entry points (see pyproject.toml); importing this package
also registers the ``elmo`` factory and the doc/token/span extensions.
"""

from . import architectures  # registers spacy_elmo.ElmoBiLM.v2 (see its docstring)
from .component import ElmoComponent, make_elmo
from .doc_data import install_extensions, install_hooks

__all__ = ["ElmoComponent", "make_elmo", "install_extensions", "install_hooks"]
