"""The bidirectional LM of pretraining: a BiLM (shared token encoder, two LSTM
stacks) plus one softmax shared by both directions. No spaCy here."""

from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bilm import BiLM
from ..bilm.lstm import LstmState
from ..errors import Errors
from .sampler import LogUniformSampler, Sample
from .softmax import SoftmaxLayer


class LMOutput(NamedTuple):
    """Per-position negative log-likelihoods ``(B, T)`` of each direction
    (zero where masked) and the final LSTM state to carry."""

    nll_fwd: Tensor
    nll_bwd: Tensor
    state: LstmState


class SampleLogQ(NamedTuple):
    """The sampled softmax's corrections (:meth:`~.sampler.LogUniformSampler.log_expected_count`, float32) of a step's sample,
    computed with its draw: of every target position ``(B, T)`` of each direction, and of the candidates ``(S,)``."""

    targets_fwd: Tensor
    targets_bwd: Tensor
    candidates: Tensor


class BidirectionalLM(nn.Module):
    def __init__(self, bilm: BiLM, softmax: SoftmaxLayer) -> None:
        super().__init__()
        self.bilm = bilm
        self.softmax = softmax

    def forward(
        self,
        unique_chars: Tensor,
        index_fwd: Tensor,
        index_bwd: Tensor,
        targets_fwd: Tensor,
        targets_bwd: Tensor,
        lengths: Tensor,
        state: Optional[LstmState] = None,
        sample: Optional[Sample] = None,
        sampler: Optional[LogUniformSampler] = None,
        logq: Optional[SampleLogQ] = None,
        positions: Optional[Tensor] = None,
    ) -> LMOutput:
        """One truncated-BPTT window of both LMs.

        unique_chars: ``(U, W)`` shifted char ids of the distinct input tokens
        (each encoded once); index_fwd / index_bwd: ``(B, T)`` rows of
        ``unique_chars`` read by each direction (the backward stream is already
        reversed); targets_*: ``(B, T)`` target ids; lengths: ``(B,)`` valid
        prefix of each row, on the host or the device (on a GPU, host lengths cost the LSTM no host sync). ``sample`` None means the full softmax; ``logq``: its corrections computed
        beforehand (None: computed from the targets, on their device). ``positions``: ``(N,)`` the flat
        positions ``b * T + t`` of the targets (``t < lengths[b]``), ascending, computed beforehand
        (:func:`target_positions`; None: from ``lengths`` here, which on a GPU waits for the kernels
        queued before it).
        """
        # Gathers by index_select / embedding rather than tensor[index] or tensor[mask]:
        # their backwards are index_add_ where indexing's is an accumulating index_put_
        # (several times slower on the CPU).
        tokens = self.bilm.token_encoder(unique_chars)
        x_fwd, x_bwd = F.embedding(index_fwd, tokens), F.embedding(index_bwd, tokens)
        outs_f, outs_b, final = self.bilm.lstm(x_fwd, x_bwd, lengths, state, reverse_backward=False)
        B, T = targets_fwd.shape
        if positions is None:
            mask = torch.arange(T, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
            positions = mask.reshape(-1).nonzero().squeeze(1).to(targets_fwd.device)
        valid = positions
        # Both directions in one softmax call: the candidates are shared, so their rows are
        # gathered once, the logits are one product, and the softmax weight gets one dense
        # gradient instead of one per direction and lookup.
        h = torch.cat([o[-1].reshape(B * T, -1).index_select(0, valid) for o in (outs_f, outs_b)])

        def both(fwd: Tensor, bwd: Tensor) -> Tensor:  # the valid positions of both directions, as the rows of h
            return torch.cat([fwd.reshape(-1)[valid], bwd.reshape(-1)[valid]])

        targets = both(targets_fwd, targets_bwd)
        if sample is None:
            values = self.softmax.full_nll(h, targets)
        elif sampler is None:
            raise ValueError(Errors.E_SAMPLE_WITHOUT_SAMPLER)
        else:
            corrections = None if logq is None else (both(logq.targets_fwd, logq.targets_bwd), logq.candidates)
            values = self.softmax.sampled_nll(h, targets, sample, sampler, backend=self.bilm.backend, logq=corrections)
        n = values.shape[0] // 2
        # index_copy, not masked_scatter: on a GPU the latter's backward (masked_select) waits for the device
        nll = [values.new_zeros(B * T).index_copy(0, valid, part).view(B, T) for part in (values[:n], values[n:])]
        return LMOutput(nll[0], nll[1], final)


def target_positions(lengths: Tensor, T: int) -> Tensor:
    """``(N,)`` int64: the flat positions ``b * T + t`` with ``t < lengths[b]``, ascending (host ``lengths``)."""
    return torch.from_numpy(np.flatnonzero(np.arange(T)[None, :] < lengths.numpy()[:, None]).astype(np.int64))


def encode_batch(type_fwd: Tensor, type_bwd: Tensor, char_table) -> Tuple[Tensor, Tensor, Tensor]:
    """Input type ids ``(B, T)`` of both directions -> ``(unique_chars (U, W), index_fwd, index_bwd)``."""
    # NumPy's unique (one thread) for the host's preparation of a step: torch's sort enters an OpenMP
    # region that, on busy cores, waits for a scheduler slice (LogUniformSampler says more).
    both = np.concatenate([type_fwd.numpy(), type_bwd.numpy()], 1)
    unique, inverse = np.unique(both, return_inverse=True)
    rows = inverse.reshape(both.shape).astype(np.int64, copy=False)
    T = type_fwd.shape[1]
    # each direction's rows contiguous: a strided view would not copy to a GPU from pinned memory as one block
    index_fwd, index_bwd = (torch.from_numpy(np.ascontiguousarray(r)) for r in (rows[:, :T], rows[:, T:]))
    return char_table(torch.from_numpy(unique)), index_fwd, index_bwd
