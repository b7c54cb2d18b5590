"""Model attrs that a config block sets: the config's value runs, never a saved one.

thinc saves a model's attrs with its weights and, loading (``from_bytes`` / ``from_disk``, so ``spacy.load``),
puts the saved values over those the config just built: a setting given at load (``spacy.load(path,
config=...)``) or edited in the config of a pipeline trained further was shown by ``nlp.config`` and not run.
:func:`setting` keeps such a value in a subclass of its type (``int``, ``float``, ``str``; a bool as an int
that prints as one) that thinc neither saves (its ``serialize_attr`` raises TypeError, which thinc's
``to_dict`` skips, as it skips a function) nor restores (``deserialize_attr`` dispatches on the value already
there: it is kept, also over a value that a pipeline saved before this module wrote). Settings that describe
the saved weights (a mix's ``layer_norm``) stay plain attrs, saved and restored.
"""

from numbers import Integral
from typing import Any

import numpy
from thinc.model import deserialize_attr, serialize_attr


class Setting:
    """A model attr that its config block sets (see the module)."""

    __slots__ = ()


class IntSetting(Setting, int):
    __slots__ = ()


class FloatSetting(Setting, float):
    __slots__ = ()


class StrSetting(Setting, str):
    __slots__ = ()


class FlagSetting(Setting, int):
    """A bool setting (``bool`` cannot be subclassed): 1 or 0, printed as True or False."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(bool(self))

    __str__ = __repr__


def setting(value: Any) -> Setting:
    """``value`` (a bool, int, float or str, numpy's scalars too) as a :class:`Setting` of its kind."""
    if isinstance(value, Setting):
        return value
    if isinstance(value, str):
        return StrSetting(value)
    if isinstance(value, (bool, numpy.bool_)):
        return FlagSetting(bool(value))
    if isinstance(value, Integral):
        return IntSetting(int(value))
    return FloatSetting(float(value))


@serialize_attr.register(Setting)
def _not_saved(_: Setting, value: Setting, name: str, model: Any) -> bytes:
    raise TypeError(f"{name}: a setting of the model's config, not saved with the model")


@deserialize_attr.register(Setting)
def _kept(current: Setting, value: Any, name: str, model: Any) -> Setting:
    return current
