"""spaCy integration: the ``elmo`` component, listeners, ScalarMix (imports spaCy and thinc).

Registered through entry points (see pyproject.toml); importing this package
also registers the ``elmo`` factory and the doc/token/span extensions, so that a
process without an ``elmo`` component (one that reads a ``DocBin``, ``Doc.from_bytes``
or unpickles docs, whose user hooks import this package) reads ``doc._.elmo`` and
the vectors the hooks give.
"""

from . import architectures  # registers spacy_elmo.ElmoBiLM.v2 (see its docstring)
from .component import ElmoComponent, make_elmo
from .doc_data import install_extensions, install_hooks

install_extensions()

__all__ = ["ElmoComponent", "make_elmo", "install_extensions", "install_hooks"]
