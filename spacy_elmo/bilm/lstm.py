"""The two independent LSTM-with-projection stacks of the biLM."""

import math
from typing import List, Optional, Tuple, cast

import torch
from torch import Tensor, nn

from .. import ops
from .config import BiLMConfig

#: ``(h (2, L, B, P), c (2, L, B, C))``: per direction (0 forward, 1 backward) and layer.
LstmState = Tuple[Tensor, Tensor]


class LstmCellWeights(nn.Module):
    """Weights of one direction-layer, TF layout, gate blocks i, j, f, o.

    ``w_input (I, 4C)``, ``w_recurrent (P, 4C)``, ``bias (4C,)`` (no forget
    bias: 1.0 is added at run time), ``w_proj (C, P)``.
    """

    def __init__(self, input_dim: int, cell_dim: int, proj_dim: int) -> None:
        super().__init__()
        self.w_input = nn.Parameter(torch.empty(input_dim, 4 * cell_dim))
        self.w_recurrent = nn.Parameter(torch.empty(proj_dim, 4 * cell_dim))
        self.bias = nn.Parameter(torch.empty(4 * cell_dim))
        self.w_proj = nn.Parameter(torch.empty(cell_dim, proj_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Glorot-uniform over the stacked [input; recurrent] matrix, as TF's LSTMCell.
        fan_in = self.w_input.shape[0] + self.w_recurrent.shape[0]
        bound = math.sqrt(6.0 / (fan_in + self.w_input.shape[1]))
        nn.init.uniform_(self.w_input, -bound, bound)
        nn.init.uniform_(self.w_recurrent, -bound, bound)
        nn.init.zeros_(self.bias)
        nn.init.xavier_uniform_(self.w_proj)

    def tensors(self) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.w_input, self.w_recurrent, self.bias, self.w_proj


class BiLstm(nn.Module):
    """Forward and backward stacks of ``n_layers`` LSTM-with-projection layers.

    The directions share nothing and are never concatenated between layers.
    Layer ``l >= 1`` adds its input (residual) when ``use_skip_connections``.
    ``dropout`` (training only) applies to every layer input and the top
    output, as in bilm-tf; it is 0 unless a trainer sets it.
    """

    def __init__(self, config: BiLMConfig, backend: str = "reference") -> None:
        super().__init__()
        self.config = config
        self.backend = backend
        self.dropout = 0.0
        P, C = config.projection_dim, config.cell_dim
        self.forward_layers = nn.ModuleList([LstmCellWeights(P, C, P) for _ in range(config.n_layers)])
        self.backward_layers = nn.ModuleList([LstmCellWeights(P, C, P) for _ in range(config.n_layers)])

    def carry(self, state: LstmState, device: torch.device) -> LstmState:
        """A carried ``state`` in the dtype of the weights, on ``device``: the module may have been cast or moved
        (.half(), .double(), .to(device)) since it was stored, or it comes from a call under autocast (a bfloat16 h
        beside a float32 c, as a CUDA AMP pretraining checkpoint holds it). Outside autocast the ops refuse states of
        another dtype than their input; under autocast they cast them where they run lower (exactly: the stored value
        was rounded to that dtype)."""
        dtype = cast(LstmCellWeights, self.forward_layers[0]).w_input.dtype  # nn.ModuleList items are untyped
        h, c = state
        return h.to(device, dtype), c.to(device, dtype)

    def zero_state(self, batch: int, like: Tensor) -> LstmState:
        L, P, C = self.config.n_layers, self.config.projection_dim, self.config.cell_dim
        return like.new_zeros(2, L, batch, P), like.new_zeros(2, L, batch, C)

    def _drop(self, x: Tensor) -> Tensor:
        return nn.functional.dropout(x, self.dropout, self.training) if self.dropout > 0 else x

    def forward(
        self,
        x_fwd: Tensor,
        x_bwd: Tensor,
        lengths: Tensor,
        state: Optional[LstmState] = None,
        reverse_backward: bool = True,
    ) -> Tuple[List[Tensor], List[Tensor], LstmState]:
        """Run both stacks.

        x_fwd, x_bwd: ``(B, T, P)`` inputs of each direction (the same tensor at
        inference; at pretraining the backward LM reads its own reversed stream
        and ``reverse_backward`` is False).
        lengths: LongTensor ``(B,)``. state: initial ``LstmState`` or None (zeros).
        Returns per-layer outputs of each direction (``(B, T, P)``, zero at padded
        positions) and the final ``LstmState``.
        """
        cfg = self.config
        outs_f: List[Tensor] = []
        outs_b: List[Tensor] = []
        h_n, c_n = [], []
        xf, xb = x_fwd, x_bwd
        for layer, (wf, wb) in enumerate(zip(self.forward_layers, self.backward_layers)):
            layer_state = None if state is None else (state[0][:, layer], state[1][:, layer])
            of, ob, h, c = ops.bilstm_layer(
                self._drop(xf),
                self._drop(xb),
                lengths,
                cast(LstmCellWeights, wf).tensors(),  # nn.ModuleList items are untyped
                cast(LstmCellWeights, wb).tensors(),
                layer_state,
                cfg.cell_clip,
                cfg.proj_clip,
                reverse_backward,
                cfg.use_skip_connections and layer > 0,
                backend=self.backend,
            )
            outs_f.append(of)
            outs_b.append(ob)
            h_n.append(h)
            c_n.append(c)
            xf, xb = of, ob
        if self.dropout > 0 and self.training:
            outs_f[-1], outs_b[-1] = self._drop(outs_f[-1]), self._drop(outs_b[-1])
        return outs_f, outs_b, (torch.stack(h_n, 1), torch.stack(c_n, 1))
