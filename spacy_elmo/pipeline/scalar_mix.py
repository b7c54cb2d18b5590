"""Thinc layers of a listener: the task's ScalarMix and ELMo's own dropout.

``scalar_mix_layer``: ``List[Floats3d (L + 1, n, D)] -> List[Floats2d (n, D)]``,
``ELMo_k = gamma * sum_j softmax(w)_j * h_{k,j}`` (elmo-spec §7), params "w"
(``(L + 1,)``, zeros = uniform) and "gamma" (``(1,)``, 1.0). With
``layer_norm=True`` each layer of each doc is first normalised by one
mean/variance over its ``(n, D)`` elements (elmo-spec §7's layer norm, no
affine), leaving out the all-zero rows of whitespace tokens as AllenNLP leaves
out padding. AllenNLP takes that statistic over the whole padded batch; here it
is per doc, so that a doc's statistics never depend on which docs share its
batch (``nlp.pipe`` batches differently from training).
``elmo_dropout``: dropout on ``List[Floats2d]`` whose rate lives in the attr
``"elmo_rate"``: spaCy overwrites every attr named ``dropout_rate`` with
``[training] dropout``, and ELMo wants its own 0.5 after the mix.
"""

import math
import sys
from numbers import Integral, Real
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

from thinc.api import Model
from thinc.types import Floats2d, Floats3d

from ..bilm.scalar_mix import LAYER_NORM_EPS, mix_weights_of
from ..errors import Errors
from .callers import runs
from .settings import setting


def scalar_mix_layer(
    n_layers: Optional[int] = None,
    initial_weights: Optional[Sequence[float]] = None,
    trainable: bool = True,
    l2: float = 0.0,
    layer_norm: bool = False,
) -> Model[List[Floats3d], List[Floats2d]]:
    """``spacy_elmo.ScalarMix.v1``: :func:`mix_layer` whose ``l2`` is named so in its errors."""
    return mix_layer(n_layers, initial_weights, trainable, l2, layer_norm, l2_key="l2", block="spacy_elmo.ScalarMix.v1")


def mix_layer(
    n_layers: Optional[int],
    initial_weights: Optional[Sequence[float]],
    trainable: bool,
    l2: float,
    layer_norm: bool,
    *,
    l2_key: str,
    block: str,
) -> Model[List[Floats3d], List[Floats2d]]:
    """n_layers: L + 1 (inferred from the data when None); l2: the paper's lambda * ||w||^2, a finite number
    >= 0, else an error naming ``l2_key`` of the config ``block`` that set it.

    layer_norm: normalise each layer of each doc (one mean/variance per doc and layer) before mixing.
    """
    of_component, _ = building()
    if not is_setting(l2, lambda v: v >= 0):
        raise ValueError(Errors.E_LISTENER_MIX_L2.format(of_component=of_component, key=l2_key, value=l2, block=block))
    if n_layers is not None and not is_setting(n_layers, lambda v: v >= 1, whole=True):
        raise ValueError(Errors.E_SCALAR_MIX_SIZE.format(value=n_layers))
    if _holds_non_numbers(initial_weights):
        raise ValueError(
            Errors.E_LISTENER_INITIAL_WEIGHTS.format(of_component=of_component, value=initial_weights, block=block)
        )
    # finite numbers; their count is checked at initialize (an empty list: equal weights, as null)
    weights = mix_weights_of(initial_weights) if initial_weights is not None else None
    return Model(
        "elmo_scalar_mix",
        _mix_forward,
        init=_mix_init,
        dims={"nL": None if n_layers is None else int(n_layers)},
        params={"w": None, "gamma": None},
        # trainable and l2 are the config's also when a saved model is loaded (.settings); layer_norm, which the
        # saved weights were trained with, and initial_weights (read at initialize only) are saved with them
        attrs={
            "initial_weights": weights or None, "trainable": setting(bool(trainable)), "l2": setting(float(l2)),
            "layer_norm": layer_norm,
            # where its settings were given, for initialize's error on the count of initial_weights
            "block": setting(block), "of_component": setting(of_component),
        },
    )


def _mix_init(model: Model, X: Optional[List[Floats3d]] = None, Y=None) -> None:
    if X is not None and len(X) and not model.has_dim("nL"):
        model.set_dim("nL", int(X[0].shape[0]))
    nL = model.get_dim("nL")
    w = model.ops.alloc1f(nL)
    initial = model.attrs["initial_weights"]
    if initial is not None:
        if len(initial) != nL:
            raise ValueError(
                Errors.E_LISTENER_INITIAL_WEIGHTS_COUNT.format(
                    of_component=model.attrs.get("of_component", ""), block=model.attrs.get("block", "ScalarMix"),
                    found=len(initial), expected=nL,
                )
            )
        w[:] = model.ops.asarray1f(initial)
    model.set_param("w", w)
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _softmax(ops, w):
    e = ops.xp.exp(w - w.max())
    return e / e.sum()


def _word_rows(X: Floats3d):
    """``(L + 1, n, D)`` -> ``(n,)`` bool: the rows that are not zero in every layer. The all-zero
    rows are the component's whitespace tokens (the biLM never reads them)."""
    return (X != 0).any(axis=(0, 2))


def _on_words(xp, keep, d):
    """``d`` with 0 wherever the bool ``keep`` (broadcast to ``d``) is False: a select, so that an
    inf or NaN gradient at a whitespace row is dropped (a product with a 0/1 mask, or with the
    row's zeros, makes it NaN: inf * 0)."""
    return xp.where(keep, d, 0).astype(d.dtype, copy=False)


def _layer_norm(xp, X: Floats3d, words):
    """``(L + 1, n, D)`` -> the same normalised per layer, and its backprop (AllenNLP's form, per doc).

    ``words``: :func:`_word_rows` of ``X``. The whitespace rows are, like AllenNLP's padding,
    left out of the statistics and stay zero, so a doc's word vectors do not depend on its spacing."""
    axes = (1, 2)
    # the statistics' element count, kept as an array (a GPU doc is not read back to the host):
    # at least one row, so that a doc without words (zeros) stays zeros, with zero gradients
    count = (xp.maximum(words.sum(), 1) * X.shape[2]).astype(X.dtype)
    keep = words[None, :, None].astype(X.dtype)
    mean = X.sum(axis=axes, keepdims=True) / count
    centred = (X - mean) * keep
    inv_std = 1.0 / xp.sqrt((centred**2).sum(axis=axes, keepdims=True) / count + LAYER_NORM_EPS)
    Xn = centred * inv_std

    def backprop(dXn: Floats3d) -> Floats3d:
        # d/dx of (x - mean) / std over one group's word rows:
        # (dxn - mean(dxn) - xn * mean(dxn * xn)) / std; whitespace rows get none
        dXn = _on_words(xp, words[None, :, None], dXn)
        mean_d = dXn.sum(axis=axes, keepdims=True) / count
        mean_dx = (dXn * Xn).sum(axis=axes, keepdims=True) / count
        return inv_std * (dXn - mean_d - Xn * mean_dx) * keep

    return Xn, backprop


def _mix_forward(model: Model, Xs: List[Floats3d], is_train: bool):
    w, gamma = model.get_param("w"), model.get_param("gamma")
    for X in Xs:
        if X.shape[0] != w.shape[0]:
            raise ValueError(Errors.E_SCALAR_MIX_COUNT.format(expected=w.shape[0], found=X.shape[0]))
    s = _softmax(model.ops, w)
    xp = model.ops.xp
    Xs = [cast(Floats3d, X.astype("float32", copy=False)) for X in Xs]  # thinc types astype() as Floats3d | Ints3d
    raw = Xs
    # the whitespace rows: for the layer norm now, else only in a trainable mix's backprop (not at inference)
    words = [_word_rows(X) for X in raw] if model.attrs.get("layer_norm", False) else None
    norm_bps = None
    if words is not None:
        normed = [_layer_norm(xp, X, k) for X, k in zip(Xs, words)]
        Xs, norm_bps = [n[0] for n in normed], [n[1] for n in normed]
    mixed = [xp.tensordot(s, X, axes=(0, 0)) for X in Xs]  # (n, D), without gamma
    Ys = [gamma[0] * m for m in mixed]

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        if model.attrs["trainable"]:
            # whitespace rows are zeros in X and in the mix: they add nothing to dgamma and dw,
            # also where their gradient is inf (a product with their zeros would be NaN)
            rows = words if words is not None else [_word_rows(X) for X in raw]
            dWs = [_on_words(xp, k[:, None], dY) for k, dY in zip(rows, dYs)]
            dgamma = sum(float((dY * m).sum()) for dY, m in zip(dWs, mixed))
            ds = sum((xp.tensordot(X, dY, axes=((1, 2), (0, 1))) for X, dY in zip(Xs, dWs)), xp.zeros_like(s))
            ds = ds * gamma[0]
            dw = s * (ds - (s * ds).sum())  # softmax Jacobian
            dw = dw + 2.0 * model.attrs["l2"] * w
            model.inc_grad("w", dw.astype("float32"))
            model.inc_grad("gamma", model.ops.asarray1f([dgamma]))
        # thinc's Floats2d stubs have no index with None (numpy.newaxis)
        dXs = [gamma[0] * s[:, None, None] * dY[None] for dY in dYs]  # type: ignore[call-overload]
        if norm_bps is not None:
            dXs = [bp(dX) for bp, dX in zip(norm_bps, dXs)]
        return dXs

    return Ys, backprop


def elmo_dropout(rate: float = 0.5) -> Model[List[Floats2d], List[Floats2d]]:
    """Inverted dropout on a list of 2d arrays; the rate is the attr ``elmo_rate``, in [0, 1): thinc's mask at
    a rate >= 1 is all zeros, which would train the task without ELMo and run it with ELMo."""
    if not is_setting(rate, lambda v: 0 <= v < 1):
        of_component, component = building()
        raise ValueError(Errors.E_LISTENER_DROPOUT.format(of_component=of_component, component=component, value=rate))
    return Model("elmo_dropout", _drop_forward, attrs={"elmo_rate": setting(float(rate))})  # the config's (.settings)


def is_setting(value: Any, ok: Callable[[float], bool], whole: bool = False) -> bool:
    """Whether ``value`` is a finite real number (numpy's too; not a bool: spaCy's config validation reads
    ``true`` as a number) that passes ``ok``, and a whole one (``int`` or numpy's) if ``whole``: spaCy's config
    validation checks the type only, and Python code may pass numpy scalars."""
    if not _is_number(value) or (whole and not isinstance(value, Integral)):
        return False
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range, 10**400
        return False
    return math.isfinite(number) and ok(number)


def _is_number(value: Any) -> bool:
    """A real number, numpy's too; not a bool (numpy's bool is no Real)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _holds_non_numbers(values: Any) -> bool:
    """Whether a list of weights (a list, tuple or array; None: none given) holds anything but numbers (a bool,
    text): ``float()`` would read them as numbers. What is no list at all is left to :func:`mix_weights_of`."""
    if values is None or isinstance(values, (str, bytes)):
        return False
    try:
        return not all(_is_number(v) for v in values)
    except TypeError:  # not iterable
        return False


def building() -> Tuple[str, str]:
    """``(of_component, component)`` for a listener setting's error: the pipeline component whose model
    spaCy is building (``Language.create_pipe``'s ``name``); ``("", "NAME")`` where no such frame runs."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if runs(frame, "spacy.language", "create_pipe") and isinstance(frame.f_locals.get("name"), str):
            name = frame.f_locals["name"]
            return f" of the '{name}' component", name
        frame = frame.f_back
    return "", "NAME"


def _drop_forward(model: Model, Xs: List[Floats2d], is_train: bool):
    rate = model.attrs["elmo_rate"]
    if not is_train or rate <= 0:
        return Xs, _identity
    masks = [model.ops.get_dropout_mask(X.shape, rate) for X in Xs]

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        return [dY * m for dY, m in zip(dYs, masks)]

    return [X * m for X, m in zip(Xs, masks)], backprop


def _identity(dYs):  # module level: picklable
    return dYs
