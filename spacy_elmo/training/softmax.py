"""The output softmax shared by both LM directions: sampled for training, full for evaluation."""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import ops
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

    def sampled_nll(
        self, h: Tensor, targets: Tensor, sample: Sample, sampler: LogUniformSampler, backend: str = "reference",
        logq: Optional[Tuple[Tensor, Tensor]] = None,
    ) -> Tensor:
        """TF's ``sampled_softmax_loss`` with ``remove_accidental_hits=True``.

        h ``(N, P)``, targets ``(N,)``; the candidates are shared by all N rows.
        Every logit is corrected by ``-log(expected count)``; a candidate equal
        to the row's target is removed (its logit set to the lowest float). Returns ``(N,)``.
        ``backend`` (resolved, as ``BiLM.backend``) picks the candidates' log-sum-exp:
        :func:`spacy_elmo.ops.sampled_logsumexp`. ``logq``: the corrections ``(of targets (N,), of the
        candidates (S,))`` as :meth:`LogUniformSampler.log_expected_count` gives them, computed beforehand (the training step's
        host preparation, :func:`spacy_elmo.training.prefetch.prepare_step`); None: computed here, where the
        ids are. Nothing is copied back to the host: a step on a GPU does not wait here for its kernels.
        """
        cand = sample.candidates.to(h.device)
        if logq is None:
            logq = (sampler.log_expected_count(targets, sample.num_tries),
                    sampler.log_expected_count(sample.candidates, sample.num_tries))
        true_logq, cand_logq = (q.to(h.device) for q in logq)
        # One lookup for targets and candidates: the (V, P) weight gets one dense gradient.
        # index_select, not w[rows]: its backward is an index_add_ (2.4 ms at V = 50,000,
        # 13,312 rows) where indexing's is an accumulating index_put_ (13 ms).
        n = targets.numel()
        rows = torch.cat([targets, cand])
        weight, bias = self.weight.index_select(0, rows), self.bias.index_select(0, rows)
        true_logit = (h * weight[:n]).sum(-1).float() + bias[:n].float() - true_logq
        # Accidental hits: row n's target sits at column `where[targets[n]]` of the sample
        # (-1: not sampled): N lookups instead of an (N, S) comparison.
        where = torch.full((self.vocab_size,), -1, dtype=torch.long, device=h.device)
        where[cand] = torch.arange(cand.numel(), device=h.device)
        lse = ops.sampled_logsumexp(h, weight[n:], bias[n:].float() - cand_logq, where[targets], backend=backend)
        return torch.logaddexp(lse.float(), true_logit) - true_logit
