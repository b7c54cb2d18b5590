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


#: The command-line frameworks that run spaCy's and spacy-elmo's commands, and the modules of those commands.
CLI_RUNNERS = frozenset({"typer", "click"})
CLI_MODULES = ("spacy.cli.", "spacy_elmo.cli.")


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` in the function that calls this one that names the first frame
    outside spacy-elmo, spaCy, thinc and their config libraries (:data:`LIBRARIES`): the user's line (``nlp(text)``, ``nlp.initialize()``),
    however many library frames lie between, not a line of library code. Under a command (``spacy train``,
    ``spacy debug model``, a spacy-elmo command), where that frame is the command-line framework's dispatch
    (``typer/main.py``), the command's own function (``spacy/cli/train.py``: its outermost frame of
    :data:`CLI_MODULES`). The outermost frame when all are library frames."""
    frame, level = sys._getframe(1), 1  # the function that warns: stacklevel 1
    command = None  # the level of the outermost command frame passed
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in LIBRARIES:
        if str(frame.f_globals.get("__name__", "")).startswith(CLI_MODULES):
            command = level
        frame, level = frame.f_back, level + 1
    if command is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in CLI_RUNNERS:
        return command
    return level
