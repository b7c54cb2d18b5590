"""Which spaCy function called us: the component reads a few facts from spaCy's own frames that spaCy
does not pass on (which components ``Language.update`` trains, whether ``init_nlp`` relinks, whether
``Language.rehearse`` runs). Another spaCy version's frames simply do not match: the caller then falls
back to the behaviour that assumes nothing. And where a warning for the user points: at the user's own call.
"""

import sys
from typing import Any, FrozenSet

#: Top-level packages whose frames are library code, not the user's: a warning points past them.
LIBRARIES = frozenset({"spacy_elmo", "spacy", "thinc", "confection", "catalogue"})  # confection: spaCy's configs


def runs(frame: Any, module: str, function: str) -> bool:
    """Whether ``frame`` (a frame object or None) runs ``function`` of the module named ``module``."""
    return frame is not None and frame.f_code.co_name == function and frame.f_globals.get("__name__") == module


def called_from(frame: Any, module: str, function: str) -> bool:
    """Whether ``frame`` or any frame that called it runs ``function`` of ``module``."""
    while frame is not None:
        if runs(frame, module, function):
            return True
        frame = frame.f_back
    return False


def skipped_by_the_call(component: Any) -> FrozenSet[str]:
    """The components that the ``nlp(text, disable=[...])`` or ``nlp.pipe(texts, disable=[...])`` running ``component``
    (a pipeline component object) skips: the ``disable`` local of the nearest ``Language.__call__`` / ``Language.pipe``
    frame whose pipeline holds it (spaCy skips them without marking them disabled). Empty where no such frame is
    found (the component called on its own, ``nlp.update``; another spaCy's frames)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if runs(frame, "spacy.language", "__call__") or runs(frame, "spacy.language", "pipe"):
            names = frame.f_locals
            pipeline = getattr(names.get("self"), "pipeline", None)
            if isinstance(pipeline, list) and any(proc is component for _, proc in pipeline):
                return frozenset(str(name) for name in names.get("disable") or ())
        frame = frame.f_back
    return frozenset()


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` in the function that calls this one that names the first frame
    outside spacy-elmo, spaCy, thinc and their config libraries (:data:`LIBRARIES`): the user's line (``nlp(text)``, ``nlp.initialize()``),
    however many library frames lie between, not a line of library code. The outermost frame when all are
    library frames (e.g. ``spacy train``'s)."""
    frame, level = sys._getframe(1), 1  # the function that warns: stacklevel 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in LIBRARIES:
        frame, level = frame.f_back, level + 1
    return level
