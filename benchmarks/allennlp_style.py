"""An AllenNLP-style ELMo biLM for speed comparisons, written from the spec's equations.

What makes it "AllenNLP-style" (the way ``allennlp.modules.elmo`` computes, not
its code): the char CNN is ``nn.Embedding`` + one ``nn.Conv1d`` per filter +
max + relu; the highway is one ``nn.Linear(F, 2F)`` per layer; every
LSTM-with-projection direction is a Python loop over timesteps that applies an
input linearity and a state linearity *per step* (no hoisted input GEMM), runs
the directions one after the other and reverses the backward direction by
per-sentence gathers. Exact ELMo semantics (clips, forget bias 1.0, residual),
so its outputs can be compared with the reference. Not a copy of AllenNLP.
"""

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn


class ConvTokenEncoder(nn.Module):
    """Embedding -> Conv1d per filter -> max -> relu -> highway (Linear F->2F) -> projection."""

    def __init__(self, filters: Sequence[Tuple[int, int]], char_dim: int, n_highway: int, proj_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(262, char_dim, padding_idx=0)
        self.convs = nn.ModuleList([nn.Conv1d(char_dim, count, width) for width, count in filters])
        n = sum(count for _, count in filters)
        self.highways = nn.ModuleList([nn.Linear(n, 2 * n) for _ in range(n_highway)])
        self.projection = nn.Linear(n, proj_dim)

    def char_cnn(self, char_ids: Tensor) -> Tensor:
        x = self.embedding(char_ids).transpose(1, 2)  # (N, D, W)
        return torch.cat([torch.relu(conv(x).max(-1).values) for conv in self.convs], -1)

    def forward(self, char_ids: Tensor) -> Tensor:
        x = self.char_cnn(char_ids)
        n = x.shape[-1]
        for layer in self.highways:
            h = layer(x)
            gate = torch.sigmoid(h[:, n:])
            x = gate * torch.relu(h[:, :n]) + (1 - gate) * x
        return self.projection(x)


class StepLstmWithProjection(nn.Module):
    """One direction: per-timestep input and state linearities, gates i, j, f, o."""

    def __init__(self, input_dim: int, cell_dim: int, proj_dim: int, cell_clip: Optional[float],
                 proj_clip: Optional[float]) -> None:
        super().__init__()
        self.cell_dim, self.proj_dim = cell_dim, proj_dim
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_linearity = nn.Linear(input_dim, 4 * cell_dim, bias=False)
        self.state_linearity = nn.Linear(proj_dim, 4 * cell_dim, bias=True)
        self.state_projection = nn.Linear(cell_dim, proj_dim, bias=False)
        nn.init.uniform_(self.input_linearity.weight, -0.05, 0.05)
        nn.init.uniform_(self.state_linearity.weight, -0.05, 0.05)
        nn.init.zeros_(self.state_linearity.bias)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        batch, total, _ = x.shape
        C = self.cell_dim
        h = x.new_zeros(batch, self.proj_dim)
        c = x.new_zeros(batch, C)
        out = x.new_zeros(batch, total, self.proj_dim)
        for t in range(total):
            active = (t < lengths).unsqueeze(1)
            z = self.input_linearity(x[:, t]) + self.state_linearity(h)
            i, j, f, o = z.split(C, 1)
            c_new = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j)
            if self.cell_clip is not None:
                c_new = c_new.clamp(-self.cell_clip, self.cell_clip)
            h_new = self.state_projection(torch.sigmoid(o) * torch.tanh(c_new))
            if self.proj_clip is not None:
                h_new = h_new.clamp(-self.proj_clip, self.proj_clip)
            c = torch.where(active, c_new, c)
            h = torch.where(active, h_new, h)
            out[:, t] = h_new * active
        return out


def _reverse_within(x: Tensor, lengths: Tensor) -> Tensor:
    pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    lens = lengths.unsqueeze(1)
    index = torch.where(pos < lens, lens - 1 - pos, pos)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class StepBiLstm(nn.Module):
    """Two stacks of StepLstmWithProjection, run one direction after the other."""

    def __init__(self, n_layers: int, cell_dim: int, proj_dim: int, cell_clip: Optional[float],
                 proj_clip: Optional[float], residual: bool = True) -> None:
        super().__init__()
        self.residual = residual
        self.forward_layers = nn.ModuleList(
            [StepLstmWithProjection(proj_dim, cell_dim, proj_dim, cell_clip, proj_clip) for _ in range(n_layers)])
        self.backward_layers = nn.ModuleList(
            [StepLstmWithProjection(proj_dim, cell_dim, proj_dim, cell_clip, proj_clip) for _ in range(n_layers)])

    def forward(self, x: Tensor, lengths: Tensor) -> List[Tensor]:
        outputs = []
        xf, xb = x, _reverse_within(x, lengths)
        for k, (fl, bl) in enumerate(zip(self.forward_layers, self.backward_layers)):
            of, ob = fl(xf, lengths), bl(xb, lengths)
            if self.residual and k > 0:
                valid = (torch.arange(x.shape[1], device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
                of, ob = of + xf * valid, ob + xb * valid
            outputs.append(torch.cat([of, _reverse_within(ob, lengths)], -1))
            xf, xb = of, ob
        return outputs


class AllenNLPStyleBiLM(nn.Module):
    """Token encoder + step-loop biLSTM; call with (B, T, W) shifted char ids (markers included)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.encoder = ConvTokenEncoder(config.filters, config.char_embedding_dim,
                                        config.n_highway, config.projection_dim)
        self.lstm = StepBiLstm(config.n_layers, config.cell_dim, config.projection_dim, config.cell_clip,
                               config.proj_clip, config.use_skip_connections)

    def forward(self, char_ids: Tensor) -> List[Tensor]:
        B, T, W = char_ids.shape
        mask = (char_ids > 0).any(-1)
        lengths = mask.sum(1)
        tokens = self.encoder(char_ids.view(B * T, W)).view(B, T, -1) * mask.unsqueeze(-1)
        return [torch.cat([tokens, tokens], -1)] + self.lstm(tokens, lengths)
