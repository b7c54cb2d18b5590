"""Which spaCy function called us: the component reads a few facts from spaCy's own frames that spaCy
does not pass on (which components ``Language.update`` trains, whether ``init_nlp`` relinks, whether
``Language.rehearse`` runs). Another spaCy version's frames simply do not match: the caller then falls
back to the behaviour that assumes nothing."""

from typing import Any


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
