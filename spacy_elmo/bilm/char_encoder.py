"""The context-independent token encoder: char CNN -> highway -> projection."""

import math

import torch
from torch import Tensor, nn

from .. import ops
from ..chars import N_CHAR_IDS
from .config import BiLMConfig


class CharEncoder(nn.Module):
    """Token characters ``(N, W)`` -> token vectors ``(N, P)``.

    Parameters (names are the native format's tensor names):

    * ``char_embedding``: ``(261, D)``, the stored table; shifted id ``k >= 1`` uses row ``k - 1``;
    * ``conv_weights[i]``: ``(count_i, D, width_i)``, ``conv_biases[i]``: ``(count_i,)``;
    * ``highway_weights[k]``: ``(2F, F)``, rows ``[transform; carry]``, ``highway_biases[k]``: ``(2F,)``.
      TF semantics: ``y = g * relu(t) + (1 - g) * x`` with ``g = sigmoid(carry)``;
    * ``projection``: ``nn.Linear(F, P)``, present only when ``F != P`` (as in bilm-tf).
    """

    def __init__(self, config: BiLMConfig, backend: str = "reference") -> None:
        super().__init__()
        self.config = config
        self.backend = backend
        n_filters = config.n_filters
        self.char_embedding = nn.Parameter(torch.empty(N_CHAR_IDS, config.char_embedding_dim))
        self.conv_weights = nn.ParameterList(
            [nn.Parameter(torch.empty(count, config.char_embedding_dim, width)) for width, count in config.filters]
        )
        self.conv_biases = nn.ParameterList([nn.Parameter(torch.empty(count)) for _, count in config.filters])
        self.highway_weights = nn.ParameterList(
            [nn.Parameter(torch.empty(2 * n_filters, n_filters)) for _ in range(config.n_highway)]
        )
        self.highway_biases = nn.ParameterList(
            [nn.Parameter(torch.empty(2 * n_filters)) for _ in range(config.n_highway)]
        )
        self.projection = nn.Linear(n_filters, config.projection_dim) if n_filters != config.projection_dim else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """bilm-tf's initialisation (elmo-spec §8)."""
        n_filters = self.config.n_filters
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)
        for w, b in zip(self.conv_weights, self.conv_biases):
            nn.init.uniform_(w, -0.05, 0.05)
            nn.init.zeros_(b)
        for w, b in zip(self.highway_weights, self.highway_biases):
            nn.init.normal_(w, 0.0, math.sqrt(1.0 / n_filters))
            nn.init.zeros_(b)
            with torch.no_grad():
                b[n_filters:] = -2.0  # carry bias: start close to the identity
        if self.projection is not None:
            nn.init.normal_(self.projection.weight, 0.0, math.sqrt(1.0 / n_filters))
            nn.init.zeros_(self.projection.bias)

    def forward(self, char_ids: Tensor) -> Tensor:
        """char_ids: LongTensor ``(N, W)`` (shifted ids) -> ``(N, P)``."""
        x = ops.char_cnn(
            char_ids,
            self.char_embedding,
            list(self.conv_weights),
            list(self.conv_biases),
            self.config.activation,
            backend=self.backend,
        )
        for w, b in zip(self.highway_weights, self.highway_biases):
            x = ops.highway(x, w, b, backend=self.backend)
        if self.projection is not None:
            x = self.projection(x)
        return x
