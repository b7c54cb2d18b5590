"""ScalarMix: the task-specific weighting of the biLM layers (elmo-spec §7)."""

from typing import List, Optional, Sequence

import torch
from torch import Tensor, nn

from ..errors import Errors, with_article
from .config import check_bool, is_int

LAYER_NORM_EPS = 1e-13


def mix_weights_of(initial_weights: Sequence[float]) -> List[float]:
    """``initial_weights`` as floats, checked: a sequence of numbers (no string), each finite in float32 (a NaN
    or +inf makes every mixed vector NaN, a -inf the mix weights after one training step: its gradient, its
    l2 term, Adam's moments and thinc's gradient clipping are NaN). Raises ValueError naming the fix."""
    if isinstance(initial_weights, (str, bytes)):
        raise ValueError(Errors.E_SCALAR_MIX_INIT_VALUES.format(value=initial_weights))
    try:
        values = [float(w) for w in initial_weights]
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: an int beyond float's range
        raise ValueError(Errors.E_SCALAR_MIX_INIT_VALUES.format(value=initial_weights)) from err
    # On the CPU, also where the default device is meta (a model built there for load_state_dict(assign=True)).
    if not torch.tensor(values, dtype=torch.float32, device="cpu").isfinite().all():  # 1e39 overflows float32
        raise ValueError(Errors.E_SCALAR_MIX_INIT_NAN.format(value=values))
    return values


def masked_layer_norm(tensor: Tensor, mask: Tensor) -> Tensor:
    """Normalise a whole layer tensor ``(B, T, D)`` with one mean/variance over its unmasked elements.

    Not per-token LayerNorm: one statistic per layer, no affine (AllenNLP's form). The
    statistics are summed in float32 at least (a float16 sum over a batch overflows), and a
    layer with no unmasked element gives zeros (AllenNLP's 0 / 0 gives NaN values and gradients).
    """
    x = tensor.to(torch.promote_types(tensor.dtype, torch.float32))
    m = mask.unsqueeze(-1).to(x.dtype)
    count = m.sum() * tensor.shape[-1]
    safe = count.clamp(min=1)
    mean = (x * m).sum() / safe
    var = (((x - mean) * m) ** 2).sum() / safe
    normed = (x - mean) / torch.sqrt(var + LAYER_NORM_EPS)
    return torch.where(count > 0, normed, normed.new_zeros(())).to(tensor.dtype)  # a select: inf * 0 is NaN


class ScalarMix(nn.Module):
    """``gamma * sum_j softmax(w)_j * h_j`` over ``n_layers`` tensors of equal shape.

    w starts at 0 (uniform) unless ``initial_weights`` says otherwise; gamma at 1.
    ``trainable=False`` gives a fixed mix (e.g. ``initial_weights=[-1e9, -1e9, 0]``
    for the top layer only).
    """

    def __init__(
        self,
        n_layers: int,
        do_layer_norm: bool = False,
        initial_weights: Optional[Sequence[float]] = None,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        if not is_int(n_layers) or n_layers < 1:
            raise ValueError(Errors.E_SCALAR_MIX_SIZE.format(value=n_layers))
        check_bool("ScalarMix's do_layer_norm", do_layer_norm)  # "false" was truthy: layer norm on
        check_bool("ScalarMix's trainable", trainable)
        values = mix_weights_of([0.0] * n_layers if initial_weights is None else initial_weights)
        if len(values) != n_layers:
            raise ValueError(Errors.E_SCALAR_MIX_INIT.format(found=len(values), expected=n_layers))
        self.n_layers = int(n_layers)
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.Parameter(torch.tensor(values), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    def forward(self, activations: Sequence[Tensor], mask: Optional[Tensor] = None) -> Tensor:
        """activations: ``n_layers`` tensors ``(B, T, D)`` of one shape (a list, or one stacked
        ``(n_layers, B, T, D)`` tensor); mask: BoolTensor ``(B, T)`` (needed for layer norm).

        Returns ``(B, T, D)``, ``gamma * sum_j softmax(w)_j * activations[j]``, in the dtype the
        activations promote to with ``w`` and ``gamma`` (float32 for float16 input to a float32 mix).
        Raises ValueError for another number of layers, unequal shapes, a mask of another shape or a
        layer (or, for layer norm, the mask) on another device than the mix, TypeError for a layer that is
        not a tensor.
        """
        if isinstance(activations, Tensor):
            # One (B, T, D) tensor would be mixed over its batch rows when B == n_layers.
            if activations.dim() != 4:
                raise ValueError(Errors.E_SCALAR_MIX_TENSOR.format(shape=tuple(activations.shape)))
        elif not isinstance(activations, Sequence):
            activations = list(activations)  # a generator of layers
        if len(activations) != self.n_layers:
            raise ValueError(Errors.E_SCALAR_MIX_COUNT.format(expected=self.n_layers, found=len(activations)))
        device = self.gamma.device
        for index, layer in enumerate(activations):
            if not isinstance(layer, Tensor):
                raise TypeError(Errors.E_SCALAR_MIX_LAYER_TYPE.format(index=index, a_type=with_article(type(layer).__name__)))
            if layer.device != device:  # torch's error named neither the mix nor the fix
                raise ValueError(Errors.E_SCALAR_MIX_DEVICE.format(what=f"layer {index}", found=layer.device,
                                                                   expected=device))
            if layer.shape != activations[0].shape:
                raise ValueError(
                    Errors.E_SCALAR_MIX_SHAPES.format(
                        index=index, found=tuple(layer.shape), expected=tuple(activations[0].shape)
                    )
                )
        if mask is not None and tuple(mask.shape) != tuple(activations[0].shape[:-1]):
            raise ValueError(
                Errors.E_SCALAR_MIX_MASK_SHAPE.format(found=tuple(mask.shape), expected=tuple(activations[0].shape[:-1]))
            )
        weights = torch.softmax(self.scalar_parameters, dim=0)
        if self.do_layer_norm:
            if mask is None:
                raise ValueError(Errors.E_SCALAR_MIX_MASK)
            if mask.device != device:
                raise ValueError(Errors.E_SCALAR_MIX_DEVICE.format(what="the mask", found=mask.device, expected=device))
            activations = [masked_layer_norm(a, mask) for a in activations]
        mixed = sum(w * a for w, a in zip(weights, activations))
        return self.gamma * mixed
