"""Thinc layers of a listener: the task's ScalarMix and ELMo's own dropout.

``scalar_mix_layer``: ``List[Floats3d (L + 1, n, D)] -> List[Floats2d (n, D)]``,
``ELMo_k = gamma * sum_j softmax(w)_j * h_{k,j}`` (elmo-spec §7), params "w"
(``(L + 1,)``, zeros = uniform) and "gamma" (``(1,)``, 1.0).
``elmo_dropout``: dropout on ``List[Floats2d]`` whose rate lives in the attr
``"elmo_rate"``: spaCy overwrites every attr named ``dropout_rate`` with
``[training] dropout``, and ELMo wants its own 0.5 after the mix.
"""

from typing import List, Optional, Sequence

from thinc.api import Model
from thinc.types import Floats2d, Floats3d


def scalar_mix_layer(
    n_layers: Optional[int] = None,
    initial_weights: Optional[Sequence[float]] = None,
    trainable: bool = True,
    l2: float = 0.0,
) -> Model[List[Floats3d], List[Floats2d]]:
    """n_layers: L + 1 (inferred from the data when None); l2: the paper's lambda * ||w||^2."""
    return Model(
        "elmo_scalar_mix",
        _mix_forward,
        init=_mix_init,
        dims={"nL": n_layers},
        params={"w": None, "gamma": None},
        attrs={"initial_weights": list(initial_weights) if initial_weights else None, "trainable": trainable, "l2": l2},
    )


def _mix_init(model: Model, X: Optional[List[Floats3d]] = None, Y=None) -> None:
    if X is not None and len(X) and not model.has_dim("nL"):
        model.set_dim("nL", int(X[0].shape[0]))
    nL = model.get_dim("nL")
    w = model.ops.alloc1f(nL)
    if model.attrs["initial_weights"] is not None:
        w[:] = model.ops.asarray1f(model.attrs["initial_weights"])
    model.set_param("w", w)
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def _softmax(ops, w):
    e = ops.xp.exp(w - w.max())
    return e / e.sum()


def _mix_forward(model: Model, Xs: List[Floats3d], is_train: bool):
    w, gamma = model.get_param("w"), model.get_param("gamma")
    s = _softmax(model.ops, w)
    xp = model.ops.xp
    mixed = [xp.tensordot(s, X.astype("float32", copy=False), axes=(0, 0)) for X in Xs]  # (n, D), without gamma
    Ys = [gamma[0] * m for m in mixed]

    def backprop(dYs: List[Floats2d]) -> List[Floats3d]:
        if model.attrs["trainable"]:
            dgamma = sum(float((dY * m).sum()) for dY, m in zip(dYs, mixed))
            ds = sum((xp.tensordot(X.astype("float32", copy=False), dY, axes=((1, 2), (0, 1))) for X, dY in zip(Xs, dYs)), xp.zeros_like(s))
            ds = ds * gamma[0]
            dw = s * (ds - (s * ds).sum())  # softmax Jacobian
            dw = dw + 2.0 * model.attrs["l2"] * w
            model.inc_grad("w", dw.astype("float32"))
            model.inc_grad("gamma", model.ops.asarray1f([dgamma]))
        return [gamma[0] * s[:, None, None] * dY[None] for dY in dYs]

    return Ys, backprop


def elmo_dropout(rate: float = 0.5) -> Model[List[Floats2d], List[Floats2d]]:
    """Inverted dropout on a list of 2d arrays; the rate is the attr ``elmo_rate``."""
    return Model("elmo_dropout", _drop_forward, attrs={"elmo_rate": rate})


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
