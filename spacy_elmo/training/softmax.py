"""The output softmax shared by both LM directions: sampled for training, full for evaluation."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .sampler import LogUniformSampler, Sample


class SoftmaxLayer(nn.Module):
    """``weight (V, P)``, ``bias (V,)``; bilm-tf init: N(0, 1/sqrt(P)), bias 0."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.weight, 0.0, 1.0 / math.sqrt(dim))

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def full_nll(self, h: Tensor, targets: Tensor, chunk: int = 1024) -> Tensor:
        """Exact negative log-likelihood. h ``(N, P)``, targets ``(N,)`` -> ``(N,)`` float32.

        Rows go in chunks so that ``(chunk, V)`` logits bound the memory.
        """
        out = []
        for start in range(0, h.shape[0], chunk):
            logits = F.linear(h[start : start + chunk], self.weight, self.bias).float()
            out.append(F.cross_entropy(logits, targets[start : start + chunk], reduction="none"))
        return torch.cat(out) if out else h.new_zeros(0, dtype=torch.float32)

    def sampled_nll(self, h: Tensor, targets: Tensor, sample: Sample, sampler: LogUniformSampler) -> Tensor:
        """TF's ``sampled_softmax_loss`` with ``remove_accidental_hits=True``.

        h ``(N, P)``, targets ``(N,)``; the candidates are shared by all N rows.
        Every logit is corrected by ``-log(expected count)``; a candidate equal
        to the row's target is removed (its logit set to the lowest float). Returns ``(N,)``.
        """
        cand = sample.candidates.to(h.device)
        true_logq = torch.log(sampler.expected_count(targets.cpu(), sample.num_tries)).to(h.device)
        cand_logq = torch.log(sampler.expected_count(sample.candidates, sample.num_tries)).to(h.device)
        true_logit = (h * self.weight[targets]).sum(-1).float() + self.bias[targets].float() - true_logq
        # The (N, S) logits dominate the cost: they are corrected in place (the product's
        # backward does not need its output) and never concatenated with the true logit.
        cand_logit = F.linear(h, self.weight[cand], self.bias[cand]).float()
        cand_logit.sub_(cand_logq)
        # Accidental hits: row n's target sits at column `where[targets[n]]` of the sample
        # (-1: not sampled): N lookups instead of an (N, S) comparison.
        where = torch.full((self.vocab_size,), -1, dtype=torch.long, device=h.device)
        where[cand] = torch.arange(cand.numel(), device=h.device)
        col = where[targets]
        rows = (col >= 0).nonzero().squeeze(1)
        # The lowest float rather than -inf keeps a row whose every candidate is a hit finite.
        cand_logit.index_put_((rows, col[rows]), cand_logit.new_tensor(torch.finfo(cand_logit.dtype).min))
        return torch.logaddexp(torch.logsumexp(cand_logit, 1), true_logit) - true_logit
