"""spaCy integration: the ``elmo`` component, listeners, ScalarMix (imports spaCy and thinc).

Registered through entry points (see pyproject.toml). spaCy imports this package
whenever it creates a ``Language`` (``spacy.blank``, ``spacy.load``), so importing it
registers nothing on ``Doc`` / ``Token`` / ``Span``: the ``elmo`` extensions are
registered by creating an ``elmo`` component, by ``install_hooks(doc)`` and by the
hooks of an unpickled doc, never in a process that uses none of them (where a user's
own ``Doc.set_extension("elmo", ...)`` must work).
"""

from . import architectures  # registers spacy_elmo.ElmoBiLM.v2 (see its docstring)
from .component import ElmoComponent, make_elmo
from .doc_data import install_extensions, install_hooks

__all__ = ["ElmoComponent", "make_elmo", "install_extensions", "install_hooks"]
