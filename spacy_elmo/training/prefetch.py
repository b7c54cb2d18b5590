"""A training step's inputs, prepared on the host; and that preparation done one step ahead on a thread.

:func:`prepare_step` turns a batch of type ids into everything the step reads: the distinct input
tokens' characters and each direction's rows of them (:func:`~.lm.encode_batch`), the target ids, the
lengths, the targets' positions, the sampler's draw and its softmax corrections (:class:`~.lm.SampleLogQ`).
It is CPU work, in NumPy in the calling thread (the sorts, gathers and float64 exp/log of torch's ops entered
OpenMP regions that wait for a scheduler slice on busy cores): on a GPU, where the step's kernels take a
fraction of the host's time, it was a large part of every step (session 33's profile). Both ``spacy-elmo pretrain`` and
``benchmarks/pretrain.py`` prepare their steps with it.

:class:`StepPrefetcher` runs :func:`prepare_step` of step ``s + 1`` on one background thread while the
caller runs step ``s``. The sampler's generator is drawn in the same order as without it (one preparation
at a time, in step order), so the losses are the same bit for bit, and :meth:`StepPrefetcher.boundary_state`
gives the generator's state as of the step boundary (before the draw for the step not yet run), which the
checkpoint stores: a resume equals the straight run. Nothing is prepared past the last step.
"""

from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..errors import Errors
from .lm import SampleLogQ, encode_batch, target_positions
from .sampler import LogUniformSampler, Sample
from .vocab import CharTable, Vocab

#: The name (prefix) of the preparing thread.
THREAD_NAME = "spacy-elmo-prefetch"


class StepInputs(NamedTuple):
    """One step's inputs (:func:`prepare_step`: on the host, pinned for CUDA; :meth:`to`: on the device)."""

    chars: Tensor  #: ``(U, W)`` shifted char ids of the distinct input tokens
    index_fwd: Tensor  #: ``(B, T)`` rows of ``chars`` read by the forward LM
    index_bwd: Tensor  #: ``(B, T)`` those of the backward LM (its stream already reversed)
    targets_fwd: Tensor  #: ``(B, T)`` target ids
    targets_bwd: Tensor
    lengths: Tensor  #: ``(B,)`` targets per row
    positions: Tensor  #: ``(n_targets,)`` their flat positions in ``(B, T)`` (:func:`~.lm.target_positions`)
    sample: Optional[Sample]  #: the sampler's draw; None: the full softmax
    logq: Optional[SampleLogQ]  #: its corrections (None with the full softmax)

    @property
    def n_targets(self) -> int:
        """The targets in the step, ``lengths.sum()`` (a shape: no wait for a device)."""
        return self.positions.numel()

    def to(self, device: torch.device) -> "StepInputs":
        """The tensors on ``device``; from pinned memory to a GPU without waiting (``non_blocking``)."""
        non_blocking = device.type == "cuda"
        return _each_tensor(self, lambda t: t.to(device, non_blocking=non_blocking))


def _each_tensor(inputs: StepInputs, fn: Callable[[Tensor], Tensor]) -> StepInputs:
    """``inputs`` with ``fn`` of each tensor."""
    sample = None if inputs.sample is None else inputs.sample._replace(candidates=fn(inputs.sample.candidates))
    logq = None if inputs.logq is None else SampleLogQ(*[fn(t) for t in inputs.logq])
    return inputs._replace(chars=fn(inputs.chars), index_fwd=fn(inputs.index_fwd), index_bwd=fn(inputs.index_bwd),
                           targets_fwd=fn(inputs.targets_fwd), targets_bwd=fn(inputs.targets_bwd),
                           lengths=fn(inputs.lengths), positions=fn(inputs.positions), sample=sample, logq=logq)


def prepare_step(
    batch: Sequence[Tensor], vocab: Vocab, char_table: CharTable, sampler: Optional[LogUniformSampler],
    generator: torch.Generator, pin: bool = False,
) -> StepInputs:
    """The inputs of one step from ``batch``: :class:`~.stream.StreamBatcher`'s ``(fwd, bwd)`` (every row
    ``T`` targets) or :class:`~.sentences.SentenceBatcher`'s ``(fwd, bwd, lengths)``, type ids ``(B, T + 1)``.
    ``sampler`` None: the full softmax (nothing drawn); else one draw from ``generator``. ``pin``: in pinned
    memory (for a copy to a GPU that does not wait)."""
    fwd, bwd = batch[0], batch[1]
    lengths = batch[2] if len(batch) > 2 else torch.full((fwd.shape[0],), fwd.shape[1] - 1, dtype=torch.long)
    chars, index_fwd, index_bwd = encode_batch(fwd[:, :-1], bwd[:, :-1], char_table)
    targets_fwd, targets_bwd = vocab.target_ids(fwd[:, 1:]), vocab.target_ids(bwd[:, 1:])
    sample = logq = None
    if sampler is not None:
        sample = sampler.sample(generator)
        logq = SampleLogQ(*(sampler.log_expected_count(ids, sample.num_tries)
                            for ids in (targets_fwd, targets_bwd, sample.candidates)))
    positions = target_positions(lengths, fwd.shape[1] - 1)
    inputs = StepInputs(chars, index_fwd, index_bwd, targets_fwd, targets_bwd, lengths, positions, sample, logq)
    return _each_tensor(inputs, Tensor.pin_memory) if pin else inputs


def prefetch_default(device: torch.device) -> bool:
    """Whether steps are prepared ahead when ``TrainConfig.prefetch`` is None: on a GPU, where the host bounds
    the step; not on the CPU, where the thread would take a core from the step's own threads for a
    preparation that costs about a millisecond."""
    return device.type == "cuda"


class StepPrefetcher:
    """``get(step)`` for steps ``first, first + 1, ...`` below ``end``: ``prepare(step)``'s inputs. With
    ``background``, each ``get`` starts preparing the next step on one thread (none past ``end - 1``) and
    the next ``get`` takes it (raising, with the thread's traceback, what it raised); without, ``get``
    prepares in the caller's thread. ``generator``: the one ``prepare`` draws from, in step order either way.
    ``device``: the CUDA device the thread pins memory for (None: none). :meth:`close` (or leaving the
    ``with`` block) stops the thread, waiting for a preparation in flight; call it on every way out."""

    def __init__(self, prepare: Callable[[int], StepInputs], generator: torch.Generator, end: int, background: bool,
                 device: Optional[torch.device] = None) -> None:
        self._prepare = prepare
        self._generator = generator
        self.end = end
        self._executor: Optional[ThreadPoolExecutor] = None
        if background:
            # the thread pins memory for this rank's GPU (a new thread's current device is GPU 0)
            initializer = None
            if device is not None and device.type == "cuda":  # "cuda" alone (one GPU, no torchrun): the caller's current one
                index = device.index if device.index is not None else torch.cuda.current_device()
                initializer = partial(torch.cuda.set_device, index)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME, initializer=initializer)
        #: The step being prepared on the thread, the generator's state before its draw, and its future.
        self._pending: Optional[Tuple[int, Tensor, "Future[StepInputs]"]] = None

    def get(self, step: int) -> StepInputs:
        if self._pending is not None:
            ahead, _, future = self._pending
            if ahead != step:
                raise ValueError(Errors.E_PREFETCH_ORDER.format(step=step, ahead=ahead))
            self._pending = None
            inputs = future.result()
        else:
            inputs = self._prepare(step)
        if self._executor is not None and step + 1 < self.end:
            # The thread is idle (its last preparation was just taken): the state read here is the one its draw starts from.
            self._pending = (step + 1, self._generator.get_state(), self._executor.submit(self._prepare, step + 1))
        return inputs

    def boundary_state(self) -> Tensor:
        """The generator's state as of the step boundary: before the draw of a step prepared ahead and not yet taken."""
        if self._pending is not None:
            return self._pending[1]
        return self._generator.get_state()

    def wait(self) -> None:
        """Wait for the preparation in flight (benchmarks: its time is counted in the step it overlaps)."""
        if self._pending is not None:
            self._pending[2].exception()

    def close(self) -> None:
        """Stop the thread: a preparation in flight is waited for (and dropped), one not started is cancelled."""
        self._pending = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "StepPrefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
