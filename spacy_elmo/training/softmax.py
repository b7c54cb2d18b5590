"""The output softmax shared by both LM directions: sampled for training, full for evaluation."""

import math
from typing import Optional, Tuple

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
        # One lookup for targets and candidates: the (V, P) weight gets one dense gradient.
        n = targets.numel()
        rows = torch.cat([targets, cand])
        weight, bias = self.weight[rows], self.bias[rows]
        true_logit = (h * weight[:n]).sum(-1).float() + bias[:n].float() - true_logq
        # The (N, S) logits dominate the cost, so they take as few passes as possible: the
        # product (without bias: addmm would first write the broadcast bias over all of
        # it), then one in-place pass adding the bias and the correction (neither the
        # product's backward nor this add's needs the output).
        cand_logit = F.linear(h, weight[n:]).float()
        cand_logit.add_(bias[n:].float() - cand_logq)
        # Accidental hits: row n's target sits at column `where[targets[n]]` of the sample
        # (-1: not sampled): N lookups instead of an (N, S) comparison.
        where = torch.full((self.vocab_size,), -1, dtype=torch.long, device=h.device)
        where[cand] = torch.arange(cand.numel(), device=h.device)
        col = where[targets]
        rows = (col >= 0).nonzero().squeeze(1)
        # The lowest float rather than -inf keeps a row whose every candidate is a hit
        # finite. Written outside autograd: the gradient there is exactly zero anyway (its
        # softmax exp(lowest - max) underflows to 0; a row of only hits has softmax weight
        # exp(lowest - true_logit) = 0 in the logaddexp below), and index_put_'s backward
        # would clone the whole (N, S) gradient to write those zeros.
        with torch.no_grad():
            cand_logit.index_put_((rows, col[rows]), cand_logit.new_tensor(torch.finfo(cand_logit.dtype).min))
        return torch.logaddexp(ConsumingLogSumExp.apply(cand_logit)[0], true_logit) - true_logit


class ConsumingLogSumExp(torch.autograd.Function):
    """``logsumexp(x, 1)`` of a ``(N, S)`` float tensor that nothing else needs: ``x`` is
    overwritten with ``exp(x - max)`` and reused as the softmax of the backward.
    Returns ``(lse (N,), x)``; the overwritten ``x`` comes back only because
    autograd wants every input changed in place among the outputs.

    ``torch.logsumexp`` and its backward make about five ``(N, S)`` temporaries; at
    ``N = B * U = 2560``, ``S = 8192`` that is 84 MB each, per direction and step, all
    freshly mapped (page faults) and streamed through memory. Here: none.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tuple[Tensor, Tensor]:
        top = x.amax(1, keepdim=True)
        # A row of only the lowest float (every candidate a hit) keeps a finite max.
        x.sub_(top).exp_()
        total = x.sum(1, keepdim=True)
        ctx.mark_dirty(x)
        ctx.mark_non_differentiable(x)
        # The second output never gets a gradient: without this, autograd would fill an
        # (N, S) tensor of zeros for it on every backward.
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, total)
        return (total.log() + top).squeeze(1), x

    @staticmethod
    def backward(ctx, grad: Tensor, _unused: Optional[Tensor]) -> Tensor:
        x, total = ctx.saved_tensors
        # d lse / dx = softmax = exp(x - max) / total, scaled in place.
        return x.mul_(grad.unsqueeze(1) / total)
