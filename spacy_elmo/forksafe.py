"""What a forked child process redoes (``nlp.pipe(n_process=N)`` under the fork start method, ``os.fork``).

A child of ``fork()`` has only the thread that forked: a lock another thread of the parent held is
locked in the child with no thread to release it, and work that thread had claimed (rows of the
char-CNN cache it was encoding) is never done. The locks and caches of this package register a hook
here that gives the child new locks and empty caches, as CPython's logging module renews its
handlers' locks. No spaCy import.
"""

import os
import types
import warnings
import weakref
from typing import Callable, Dict, List, Tuple

from .errors import Warnings

_FUNCTIONS: List[Callable[[], None]] = []
_METHODS: "Dict[int, weakref.WeakMethod]" = {}  # id of the reference -> it: an object's hook goes with the object


def after_fork_in_child(hook: Callable[[], None]) -> None:
    """Call ``hook()`` in every child this process forks from now on (an object's bound method is
    held weakly: it is not called once the object is gone)."""
    if isinstance(hook, types.MethodType):
        method = weakref.WeakMethod(hook, lambda gone: _METHODS.pop(id(gone), None))
        _METHODS[id(method)] = method
    else:
        _FUNCTIONS.append(hook)


def _run_hooks() -> None:
    """Every hook, each on its own: one that fails is reported and the others still run (the
    child's thread count among them, without which it can hang in OpenMP)."""
    hooks = [method() for method in list(_METHODS.values())] + list(_FUNCTIONS)
    failed: List[Tuple[Callable[[], None], Exception]] = []
    for hook in hooks:
        if hook is None:
            continue
        try:
            hook()
        except Exception as err:
            failed.append((hook, err))
    # after every hook: where warnings are errors (-W error) the first one raises
    for which, error in failed:
        warnings.warn(Warnings.W_FORK_HOOK_FAILED.format(hook=getattr(which, "__qualname__", which), error=error),
                      RuntimeWarning, stacklevel=1)


if hasattr(os, "register_at_fork"):  # not on Windows, which never forks
    os.register_at_fork(after_in_child=_run_hooks)
