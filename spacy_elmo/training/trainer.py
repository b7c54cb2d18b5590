"""The pretraining loop (bilm-tf recipe, elmo-spec §8), single process or DDP.

Per step: a ``(B, U + 1)`` window of each stream (forward, reversed-backward),
both LMs on the shared token encoder, the sampled softmax (``negatives`` ids
shared by the batch), loss ``(mean fwd + mean bwd) / 2``, global-norm clipping,
the optimizer step, and the LSTM states carried (detached) to the next window.

Under ``torchrun`` (``WORLD_SIZE > 1``) the model is wrapped in
DistributedDataParallel (gloo on CPU, NCCL on CUDA) and every rank reads its
own rows of the streams. Rank 0 writes the log, checkpoints and the model; the
held-out text is evaluated by all ranks, each its share (``evaluate_corpus``).
"""

import errno
import hashlib
import json
import math
import os
import shutil
import socket
import sys
import time
import unicodedata
import warnings
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist

from ..atomic import (atomic_write_text, fcntl, make_dirs, named_paths, names_a_file_in, naming, out_of_space, remove_empty_dirs,
                      remove_leftovers, sync, sync_dir, try_lock, warn_if_not_locked)
from ..bilm import BiLM, BiLMConfig
from ..bilm.config import byte_size, is_int, is_real
from ..bilm.initial_state import boundary_state_mean
from ..bilm.lstm import LstmState
from ..bilm.native_io import INITIAL_STATE_NAME, find_allennlp_files, read_meta
from ..device import torch_device
from ..errors import Errors, Warnings, counted, listed
from ..paths import file_identity, file_sha256, name_shown, read_json_file, shell_quoted
from ..ranks import machine_processes, torchrun_ranks
from . import checkpoint as ckpt
from . import data as corpus_data
from .data import (PRETRAINED_BY, Corpus, build_corpus, current_meta, filled_tokenizer_settings, fingerprint,
                   same_text, tokenization_change)
from .jobstore import failed_rank, record_failure
from .lm import BidirectionalLM
from .modelio import check_init_model, has_softmax, load_pretrained, recorded_reading, save_pretrained
from .prefetch import StepInputs, StepPrefetcher, prefetch_default, prepare_step
from .sampler import LogUniformSampler
from .sentences import UNRECORDED_POOL, SentenceBatcher
from .softmax import SoftmaxLayer
from .stream import StreamBatcher
from .vocab import SPECIALS, CharTable, Vocab, nfc_variants

LOG_NAME = "train_log.jsonl"
#: Where a resume builds the cache of a corpus other than data/'s, until the checkpoint accepts it.
STAGING_NAME = ".data.resume.tmp"
#: Where the replaced data/ waits while the staged cache is moved in.
RETIRED_NAME = ".data.old.tmp"


@dataclass
class TrainConfig:
    """Every setting of a pretraining run (the CLI maps its options onto this)."""

    train_path: str
    output_dir: str
    model: Optional[Dict[str, Any]] = None  # BiLMConfig dict; None: small, the checkpoint's on resume, init's with init
    heldout: Optional[str] = None
    lang: str = "en"
    # The [nlp.tokenizer] block the text is read with (pretrain --tokenizer: data.read_tokenizer_config), recorded in
    # the model's provenance; None: spaCy's tokenizer of lang, or its rule-based fallback (data.make_nlp).
    tokenizer: Optional[Dict[str, Any]] = None
    vocab_size: int = 100_000  # 0: no cap
    min_count: int = 1
    max_steps: Optional[int] = None
    epochs: Optional[float] = None  # DEFAULT_EPOCHS (bilm-tf's 10) when max_steps is None too
    batch_size: int = 128
    unroll: int = 20
    negatives: int = 8192
    optimizer: str = "adagrad"
    lr: Optional[float] = None  # adagrad 0.2, adam 1e-3
    clip: float = 10.0
    dropout: float = 0.1
    seed: int = 0
    resume: bool = False
    device: str = "cpu"
    backend: str = "auto"
    init: Optional[str] = None  # a model directory (native or AllenNLP) to fine-tune
    new_vocab: bool = False  # with init: build the vocab from this corpus (new softmax rows)
    checkpoint_every: int = 1000
    state_sentences: int = 0  # fit the saved model's initial state on this many corpus sentences; 0: zeros
    sentences: bool = False  # rows are whole sentences from the start state (what the component sees), not streams
    max_length: int = 100  # with sentences: longer sentences are cut into pieces of this many targets
    # With sentences: batches sorted by length within pools of this many (sentences.SentenceBatcher); 1: random
    # batches. None: 1 for a new run, the checkpoint's on resume (sentences.UNRECORDED_POOL if it recorded none).
    length_pool: Optional[int] = None
    log_every: int = 10
    eval_batch_size: int = 32
    progress: bool = True
    threads: Optional[int] = None
    tokenize_processes: int = 0  # worker processes tokenizing the corpus; 0: auto (data.tokenize_processes)
    # Prepare each step's host-side inputs (char encoding, targets, the sampler's draw) one step ahead on a
    # background thread (training.prefetch; the same losses either way). None: on with CUDA, off on the CPU.
    prefetch: Optional[bool] = None

    def __post_init__(self) -> None:
        self._plain_numbers()

    def _plain_numbers(self) -> None:
        """NumPy's number scalars (a sweep's ``np.arange``/``np.linspace``) as Python's int and float: an
        ``np.int64`` batch size was refused as no integer, and one kept would reach the run's JSON log
        (``asdict(cfg)``), which cannot write it. Bools, strings and floats for integer fields are left
        for :meth:`validate` to refuse."""
        for field in fields(self):
            value = getattr(self, field.name)
            if type(value) in (int, float):
                continue
            if is_int(value):
                setattr(self, field.name, int(value))
            elif is_real(value):  # an int field's float stays one, for validate to refuse
                setattr(self, field.name, float(value))

    def validate(self) -> None:
        self._plain_numbers()  # a field set after construction
        positive = {"batch_size": self.batch_size, "unroll": self.unroll, "negatives": self.negatives,
                    "checkpoint_every": self.checkpoint_every, "log_every": self.log_every, "max_length": self.max_length,
                    "eval_batch_size": self.eval_batch_size}
        if self.length_pool is not None:
            positive["length_pool"] = self.length_pool
        for name, value in positive.items():
            if not is_int(value) or value < 1:
                raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what="a positive integer", value=value))
        if self.max_steps is not None and self.epochs is not None:
            raise ValueError(Errors.E_STEPS_AND_EPOCHS)
        # Options the chosen reading does not use: a value other than the default was meant for the other one.
        if self.sentences:
            if self.unroll != _default("unroll"):
                raise ValueError(Errors.E_UNROLL_WITH_SENTENCES.format(value=self.unroll))
            if self.state_sentences:
                raise ValueError(Errors.E_STATE_SENTENCES_WITH_SENTENCES.format(value=self.state_sentences))
        elif self.max_length != _default("max_length"):
            raise ValueError(Errors.E_MAX_LENGTH_WITHOUT_SENTENCES.format(value=self.max_length))
        elif self.length_pool is not None:
            raise ValueError(Errors.E_LENGTH_POOL_WITHOUT_SENTENCES.format(value=self.length_pool))
        if not is_int(self.state_sentences) or self.state_sentences < 0:
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="state_sentences", what="0 (no fitted state) or a positive integer",
                                                             value=self.state_sentences))
        if not is_int(self.seed) or self.seed < 0:  # NumPy seeds the data order: it refused -1 once the corpus was read
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="seed", what="an integer of 0 or more", value=self.seed))
        if self.max_steps is not None and (not is_int(self.max_steps) or self.max_steps < 1):
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="max_steps", what="a positive integer", value=self.max_steps))
        self._check_bound("epochs")
        self._check_bound("vocab_size")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="threads", what="a positive integer (leave it out for torch's default)",
                                                             value=self.threads))
        # Flags are bools: a string such as "false" is truthy (sentences="false" trained on sentences), and
        # `1 in (True, False)` holds, so 1 passed the membership test that checked prefetch.
        for name in ("resume", "new_vocab", "sentences", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what="True or False", value=getattr(self, name)))
        if self.prefetch is not None and not isinstance(self.prefetch, bool):
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="prefetch", what="True, False or None (on with CUDA)",
                                                             value=self.prefetch))
        if not is_int(self.min_count) or self.min_count < 1:
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name="min_count", what="a positive integer", value=self.min_count))
        self._check_bound("lr")
        self._check_bound("clip")
        if self.init and self.model:  # an empty dict names no model, as None
            raise ValueError(Errors.E_INIT_AND_MODEL)
        if self.model:  # its sizes (BiLMConfig's errors), before OUTPUT_DIR is made and the corpus tokenized, not after
            requested_model(self)
        if self.new_vocab and not self.init:
            raise ValueError(Errors.E_NEW_VOCAB_WITHOUT_INIT)
        self._check_bound("dropout")
        self._check_bound("tokenize_processes")
        if self.tokenizer is not None:  # one a model can record: refused before OUTPUT_DIR is made (built by make_nlp)
            corpus_data.checked_tokenizer_block(self.tokenizer, Errors.E_TOKENIZER_SOURCE_CONFIG)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(Errors.E_UNKNOWN_OPTIMIZER.format(name=self.optimizer))

    def _check_bound(self, name: str) -> None:
        accepts, what = BOUNDS[name]
        value = getattr(self, name)
        if not accepts(value):
            raise ValueError(Errors.E_BAD_TRAIN_VALUE.format(name=name, what=what, value=value))


#: The optimizers ``TrainConfig.optimizer`` may name.
OPTIMIZERS = ("adagrad", "adam")

#: The most steps an epoch can have whatever the corpus: one per token at most (StreamBatcher: rows of
#: its tokens, each step ``unroll`` of them; SentenceBatcher: batches of its sentences), and a corpus holds
#: at most as many tokens as an array can index.
MOST_STEPS_PER_EPOCH = np.iinfo(np.intp).max
#: The run's length when neither --max-steps nor --epochs is given: bilm-tf's 10 epochs.
DEFAULT_EPOCHS = 10
#: The largest --epochs whose step count (epochs x steps per epoch) is a number whatever the corpus: above
#: it, the largest corpora's count overflows to infinity. Checked with the options, before the corpus is
#: read: ``--epochs 1e308`` was refused only once the corpus was tokenized, the step count needing its size.
MAX_EPOCHS = sys.float_info.max / MOST_STEPS_PER_EPOCH

#: TrainConfig fields with bounds other than "a positive integer": name -> (accepts, what it must be).
#: ``TrainConfig.validate`` checks them, and the pretrain command's option callbacks the same way
#: (naming the flag), so the two accept the same values. NaN is refused (no comparison holds); an
#: infinite clip is accepted (no clipping), an infinite epochs not (no step count: it crashed computing
#: one), nor an infinite lr (its first step makes every weight it moves infinite or NaN: the run always diverged).
BOUNDS: Dict[str, Any] = {
    "epochs": (lambda v: v is None or (is_real(v) and 0 < v <= MAX_EPOCHS),
               f"positive and finite, at most {MAX_EPOCHS:.4g} (so that its steps, up to 2**63 an epoch, can be "
               "counted; to train until stopped: a large --max-steps)"),
    "vocab_size": (lambda v: is_int(v) and (v == 0 or v > len(SPECIALS)),
                   f"0 (no cap) or more than {len(SPECIALS)} (the markers and at least one word)"),
    "lr": (lambda v: v is None or (is_real(v) and 0 < v < math.inf), "positive and finite"),
    "clip": (lambda v: is_real(v) and v > 0, "positive (a global gradient-norm bound)"),
    "dropout": (lambda v: is_real(v) and 0 <= v < 1, "in [0, 1)"),
    "tokenize_processes": (lambda v: is_int(v) and v >= 0,
                           f"a positive integer or 0 ({corpus_data.AUTO_RULE})"),
}


def _default(name: str) -> Any:
    """The default of TrainConfig field ``name`` (the CLI's too)."""
    return TrainConfig.__dataclass_fields__[name].default


# -- distributed -------------------------------------------------------------
def _setup_distributed(cfg: TrainConfig):
    """``(rank, world, device)``; initialises the process group under torchrun."""
    rank, world, local = torchrun_ranks()
    device = torch_device(cfg.device)
    if world > 1:
        if device.type == "cuda":
            # One GPU visible is the process's own (a CUDA_VISIBLE_DEVICES per process, Slurm's --gpus-per-task=1),
            # whatever its LOCAL_RANK; of several, GPU LOCAL_RANK (torchrun's one machine of N GPUs). Ranks that took
            # one GPU (torchrun --nproc-per-node 2 where one is visible) are refused once the group is up
            # (_refuse_shared_gpu): the environment alone does not tell that from a CUDA_VISIBLE_DEVICES per process.
            n_gpus = torch.cuda.device_count()
            index = 0 if n_gpus == 1 else local
            if index >= n_gpus:
                raise RuntimeError(Errors.E_DDP_DEVICE.format(
                    rank=rank, world=world, local=local, visible=counted(n_gpus, "GPU is", "GPUs are"),
                    cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES", "unset")))
            device = torch.device("cuda", index)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    return rank, world, device


#: How long the other ranks wait for rank 0 to tokenize the corpus and the held-out text: hours
#: for a large corpus, past the process group's default timeout (gloo: 30 minutes), which then
#: killed the first run on it.
TOKENIZE_TIMEOUT = timedelta(hours=48)
#: How long a failed rank waits for its peers in :func:`leave_failed_run`: it ignores Ctrl-C and SIGTERM
#: there, so a peer hung but alive must not hold it (and a ``kill`` of it) for :data:`TOKENIZE_TIMEOUT`.
LEAVE_TIMEOUT = timedelta(seconds=60)


class _Groups(NamedTuple):
    """The gloo groups of :func:`_settled` blocks (:func:`_wait_groups`)."""

    setup: Any  #: :data:`TOKENIZE_TIMEOUT`: the blocks before the loop (rank 0 checks OUTPUT_DIR, reads the held-out text, tokenizes, moves the cache)
    loop: Any  #: the default timeout (gloo: 30 minutes): rank 0's writes in the loop (checkpoints, the log)
    leave: Any  #: :data:`LEAVE_TIMEOUT`: :func:`leave_failed_run`'s barrier


def _wait_groups(world: int) -> Optional[_Groups]:
    """The groups for waiting on what rank 0 does alone (:func:`_settled`), None for one process. Only the
    blocks before the loop may wait hours; one in the loop (a checkpoint, a log line) waits as long as the
    process group's collectives. Every rank must call it, at the same point."""
    if world == 1:
        return None
    return _Groups(dist.new_group(backend="gloo", timeout=TOKENIZE_TIMEOUT), dist.new_group(backend="gloo"),
                   dist.new_group(backend="gloo", timeout=LEAVE_TIMEOUT))


def _refuse_shared_gpu(groups: Optional[_Groups], device: torch.device) -> None:
    """Refuse a job where two ranks train on one GPU, said by rank 0 (every rank raises it alike). A process that
    sees one GPU trains on it whatever its LOCAL_RANK (:func:`_setup_distributed`): right for a CUDA_VISIBLE_DEVICES
    of its own, but ``torchrun --nproc-per-node 2`` on a machine of one GPU (or under one CUDA_VISIBLE_DEVICES of one
    GPU for all) then put both ranks on it, and NCCL failed only in DDP's constructor, once rank 0 had tokenized the
    corpus ("Duplicate GPU detected"): the environment alone does not tell the two apart, each rank's GPU (its
    machine's name, the GPU's UUID) does. One all-gather on the set-up's gloo group, for CUDA under torchrun alone
    (``groups`` None: one process). Every rank must call it, at the same point."""
    if groups is None or device.type != "cuda":
        return
    mine = (socket.gethostname(), str(torch.cuda.get_device_properties(device).uuid),
            os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
    gpus: List[Any] = [None] * dist.get_world_size(groups.setup)
    dist.all_gather_object(gpus, mine, group=groups.setup)
    with _settled(groups, setup=True):
        sharing: Dict[Tuple[str, str], List[int]] = {}
        for rank, (host, uuid, _) in enumerate(gpus):
            sharing.setdefault((host, uuid), []).append(rank)
        shared = next((ranks for ranks in sharing.values() if len(ranks) > 1), None)
        if shared is not None:
            host, uuid, _ = gpus[shared[0]]
            visible = sorted({gpus[r][2] for r in shared})
            err = RuntimeError(Errors.E_DDP_SAME_GPU.format(
                ranks=listed([str(r) for r in shared], 8), world=len(gpus), uuid=uuid, host=host,
                cuda_visible=" or ".join(visible)))
            setattr(err, "spacy_elmo_every_rank", True)  # every rank met it: rank 0 says it (raised_on_every_rank)
            raise err


class PeerFailed(RuntimeError):
    """This rank's part of a :func:`_settled` block went well, another rank's failed: that rank says why
    (and rank 0 says which rank failed: on a job of several machines only rank 0's terminal may be watched)."""


@contextmanager
def _settled(groups: Optional[_Groups], setup: bool = False):
    """A block after which every rank (``groups``: :func:`_wait_groups`; None: one process) knows whether it
    failed on any rank, before any rank goes on to a collective that a failed rank would never join: rank 0's
    checks of OUTPUT_DIR (its lock), its tokenization, its writes. The others waited in that collective until
    rank 0's exit broke it (gloo's "Connection closed by peer") or torchrun killed them (SIGTERM, reported as
    their failure). ``setup``: a block before the loop, which may take hours (:data:`TOKENIZE_TIMEOUT`).
    A rank whose block raised raises its error and says it (:func:`said_by_this_rank`), except an error of
    every rank's (:func:`_same_on_every_rank`), which only the lowest rank that met it says. A peer gone
    in the same block (its exit breaks the all-reduce) leaves this rank's error to this rank to say. The ranks
    whose block went well raise :class:`PeerFailed`, which rank 0 alone says, and every rank then leaves the
    run together (:func:`leave_failed_run`). One all-reduce of one number. Every rank must enter it, at the
    same point."""
    if groups is None:
        yield
        return
    group = groups.setup if setup else groups.loop
    rank = dist.get_rank()
    try:
        yield
    except Exception as err:
        try:
            lowest = _lowest_failed(group, rank)
        except RuntimeError:  # gloo's "Connection closed by peer": a peer gone in this block, which says nothing
            lowest = None
        if lowest in (rank, None):
            setattr(err, "spacy_elmo_every_rank", False)  # the lowest rank that failed says it, rank 0 or not
        if lowest is not None:  # else no peer to wait for
            setattr(err, _SETTLED, groups.leave)
        raise
    lowest = _lowest_failed(group, None)
    if lowest is not None:
        failed = PeerFailed(Errors.E_PEER_FAILED.format(rank=lowest))
        setattr(failed, _SETTLED, groups.leave)
        raise failed


#: The attribute of an error raised by a :func:`_settled` block that failed: the group to leave the run on.
_SETTLED = "spacy_elmo_settled"


def _lowest_failed(group, failed: Optional[int]) -> Optional[int]:
    """The lowest rank of ``group`` that failed (None: none), ``failed`` this rank's (None: it did not)."""
    world = dist.get_world_size(group)
    lowest = torch.tensor([world if failed is None else failed], dtype=torch.int64)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN, group=group)
    return int(lowest) if int(lowest) < world else None


# -- model and vocabulary ---------------------------------------------------
def _build_model(cfg: TrainConfig, corpus: Corpus, resume_payload: Optional[dict], is_main: bool = True):
    """``(bilm, softmax, vocab, corpus, new_vocab)``; corpus type ids are remapped onto a kept init vocab.
    ``new_vocab``: an init's vocabulary was rebuilt from the corpus (--new-vocab, or an init without a
    softmax, whose vocabulary comes from the corpus whatever the flag). is_main: this process warns (rank 0)."""
    init_softmax = None
    if cfg.init and resume_payload is None:
        bilm, init_softmax, init_vocab, _ = load_pretrained(cfg.init, backend=cfg.backend)
        bilm.set_initial_state(None)  # it belongs to the old weights; saves refit it when asked
        config = bilm.config
        if init_softmax is None and not cfg.new_vocab and is_main:
            warnings.warn(Warnings.W_INIT_WITHOUT_SOFTMAX.format(path=cfg.init), RuntimeWarning, stacklevel=2)
    else:
        config = BiLMConfig.from_dict(resume_payload["settings"]["model_config"]) if resume_payload else requested_model(cfg)
        bilm = BiLM(config, backend=cfg.backend)
        init_vocab = None
        if cfg.init:  # resuming a fine-tuning run: the vocab choice is recomputed below
            _, init_softmax, init_vocab, _ = load_pretrained(cfg.init, backend="reference")
    if is_main and resume_payload is None:  # said when the run began
        _warn_nfc_variants(corpus.types)
    keeps_init_vocab = init_vocab is not None and init_softmax is not None and not cfg.new_vocab
    if keeps_init_vocab:
        # Keep the model's vocabulary (its softmax rows); this corpus's other words are OOV.
        unused = [f"--{name.replace('_', '-')} {getattr(cfg, name)}" for name in ("vocab_size", "min_count")
                  if getattr(cfg, name) != _default(name)]
        if unused and is_main:
            warnings.warn(Warnings.W_VOCAB_OPTIONS_WITH_INIT.format(options=" and ".join(unused), path=cfg.init),
                          RuntimeWarning, stacklevel=2)
        assert init_vocab is not None  # keeps_init_vocab says so
        vocab = Vocab(list(init_vocab.targets))
        remap = np.array([vocab.add(t) for t in corpus.types], dtype=np.int32)
        if is_main and corpus.counts is not None and resume_payload is None:  # said when the run began
            assert cfg.init is not None  # init_vocab was read from it
            _warn_init_oov(corpus.counts[3:], remap[3:] >= vocab.size, cfg.init, vocab.size)
        corpus = Corpus(remap[corpus.tokens], corpus.lengths, vocab.types, None)
        softmax = init_softmax
    else:
        assert corpus.counts is not None  # read from the corpus cache (Corpus.load), as every pretraining corpus is
        vocab = Vocab.from_counts(corpus.types, corpus.counts, cfg.vocab_size, cfg.min_count)
        softmax = SoftmaxLayer(vocab.size, config.projection_dim)
        if init_softmax is not None and init_vocab is not None:
            # Words the old vocabulary knew keep their trained softmax rows.
            with torch.no_grad():
                for i, t in enumerate(vocab.targets):
                    j = init_vocab.index.get(t)
                    if j is not None and j < init_vocab.size:
                        softmax.weight[i] = init_softmax.weight[j]
                        softmax.bias[i] = init_softmax.bias[j]
    return bilm, softmax, vocab, corpus, bool(cfg.init) and not keeps_init_vocab


#: The share of the corpus's words outside a kept ``--init`` vocabulary above which pretrain warns.
INIT_OOV_WARNING_RATE = 0.2


def _warn_init_oov(counts: np.ndarray, outside: np.ndarray, init: str, size: int) -> None:
    """Warn when more than :data:`INIT_OOV_WARNING_RATE` of the corpus's words (``counts`` per type,
    ``outside``: the types the kept vocabulary lacks) would be <UNK> targets."""
    n_words, n_oov = int(counts.sum()), int(counts[outside].sum())
    if n_words and n_oov > INIT_OOV_WARNING_RATE * n_words:
        warnings.warn(Warnings.W_INIT_VOCAB_OOV.format(rate=n_oov / n_words, n_oov=n_oov, n_words=n_words, path=init,
                                                       size=size), RuntimeWarning, stacklevel=3)


def _warn_nfc_variants(types: List[str]) -> None:
    """Warn when the corpus's ``types`` spell a word in more than one Unicode normalization form
    (:func:`~.vocab.nfc_variants`): ``café`` NFC and NFD are two types with two vectors."""
    n, spellings = nfc_variants(types)
    if n:
        warnings.warn(Warnings.W_NFC_VARIANTS.format(
            n_words=counted(n, "word"), are="is" if n == 1 else "are", spellings=" and ".join(map(ascii, spellings)),
            nfc=unicodedata.normalize("NFC", spellings[0])), RuntimeWarning, stacklevel=3)


def fit_start_state(bilm: BiLM, corpus: Corpus, max_sentences: int, warmup: int = 2) -> Optional[LstmState]:
    """The initial state fitted on the first ``max_sentences`` sentences of
    ``corpus`` (up to 32 streams), or None when there are too few sentences or
    ``max_sentences`` is 0. ``bilm`` is left untouched: under DDP every rank
    must keep the same buffers, so the state goes to the saved files only."""
    n = min(len(corpus.lengths), max(0, max_sentences))
    rows = min(32, n // (warmup + 1))
    if rows < 1:
        return None
    sentences = [
        [corpus.types[i] for i in corpus.tokens[start + 1 : start + length - 1]]
        for start, length in zip(corpus.starts[:n], corpus.lengths[:n])
    ]
    return boundary_state_mean(bilm, sentences, rows=rows, warmup=warmup)


def requested_model(cfg: TrainConfig) -> BiLMConfig:
    """The model ``cfg`` asks for (the small preset when it names none)."""
    return BiLMConfig.from_dict(cfg.model) if cfg.model else BiLMConfig.preset("small")


#: The float32 copies of the biLM's weights that training holds at least, by optimizer: the weights, their
#: gradients and the optimizer's state (Adagrad's accumulator; Adam's two moments). The softmax and the
#: activations come on top.
WEIGHT_COPIES = {"adagrad": 3, "adam": 4}


def physical_memory() -> Optional[int]:
    """This machine's physical memory in bytes (``sysconf``: Linux, macOS), None where it does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no os.sysconf (Windows), or no such name
        return None


def _warn_model_past_memory(config: BiLMConfig, optimizer: str, device: torch.device, processes: int = 1) -> None:
    """Warn when training a new model of ``config`` needs more memory than there is: the biLM is built in this
    machine's memory, then trained on ``device`` with :data:`WEIGHT_COPIES` copies of its float32 weights at least,
    by each of this machine's ``processes`` (under torchrun: one GPU each, this machine's memory shared).
    Said before the corpus is tokenized, which can take hours: the run would fail only once it was ("can't allocate
    memory") or swap for every step. A warning, not a refusal: the need is a floor and the memory the machine's (swap,
    overcommit or memory the GPU shares would make another count), and a refusal would leave no way to try."""
    weights = 4 * config.n_parameters
    needs = weights * WEIGHT_COPIES.get(optimizer, WEIGHT_COPIES["adam"])
    places = [("this machine's memory", physical_memory(), processes * (needs if device.type != "cuda" else weights))]
    if device.type == "cuda":
        places.append((f"the memory of {device}", torch.cuda.get_device_properties(device).total_memory, needs))
    for where, has, need in places:
        if has is not None and need > has:
            warnings.warn(Warnings.W_MODEL_PAST_MEMORY.format(
                n_params=config.n_parameters, weights=byte_size(weights), need=byte_size(need), where=where,
                has=byte_size(has)), RuntimeWarning, stacklevel=3)
            return


def learning_rate(name: str, lr: Optional[float]) -> float:
    """``lr``, or the recipe's rate for optimizer ``name`` when it is None."""
    return lr if lr is not None else (0.2 if name == "adagrad" else 1e-3)


def build_optimizer(name: str, lr: Optional[float], params) -> torch.optim.Optimizer:
    """``"adagrad"`` (bilm-tf's, the default) or ``"adam"``; ``lr`` None = the recipe's rate."""
    lr = learning_rate(name, lr)
    if name == "adagrad":
        # bilm-tf: AdagradOptimizer(0.2, initial_accumulator_value=1.0).
        # PyTorch's fused Adagrad is CPU-only; it is ~4x faster than the per-tensor loop on the
        # dense 50k-row softmax and gives the same updates.
        params = list(params)
        fused = all(p.device.type == "cpu" for p in params)
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=1.0, fused=fused or None)
    return torch.optim.Adam(params, lr=lr)


#: The param-group options that choose how an optimizer steps on its parameters' device, not what it computes:
#: :func:`build_optimizer` sets them for the device it is given (fused Adagrad on the CPU only).
DEVICE_BOUND_OPTIONS = ("fused", "foreach", "capturable")


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: Dict[str, Any]) -> None:
    """``optimizer.load_state_dict(saved)``, keeping ``optimizer``'s own :data:`DEVICE_BOUND_OPTIONS`.
    ``load_state_dict`` takes the saved param groups whole: a GPU run's checkpoint resumed on the CPU lost the
    CPU's fused Adagrad (~4x slower softmax updates for the rest of the run), a CPU run's resumed on a GPU stepped
    with ``fused=True`` there (an error on a torch without CUDA fused Adagrad). The groups are replaced before
    loading, so the state (Adagrad's ``step``) is also placed as this optimizer's implementation wants it."""
    groups = saved["param_groups"]
    if len(groups) == len(optimizer.param_groups):  # else load_state_dict says they differ
        groups = [dict(g, **{k: mine[k] for k in DEVICE_BOUND_OPTIONS if k in mine})
                  for g, mine in zip(groups, optimizer.param_groups)]
    optimizer.load_state_dict(dict(saved, param_groups=groups))


def _run_settings(cfg: TrainConfig, world: int) -> Dict[str, Any]:
    """The resume settings that do not depend on the corpus or the model (checked first)."""
    # The reading first: a resume in the other one is refused for that, not for an option it implies.
    # None in stream runs (absent from their older checkpoints, which still resume).
    settings = {"sentences": cfg.max_length if cfg.sentences else None,
                "batch_size": cfg.batch_size, "unroll": cfg.unroll, "world": world, "seed": cfg.seed,
                "negatives": cfg.negatives,
                "lang": cfg.lang, "tokenizer": _given_tokenizer(cfg),
                "optimizer": cfg.optimizer,
                "lr": learning_rate(cfg.optimizer, cfg.lr), "dropout": cfg.dropout, "clip": cfg.clip,
                "init": cfg.init}
    if cfg.sentences:  # sentence batches do not depend on --unroll (which older checkpoints recorded anyway)
        del settings["unroll"]
        settings["length_pool"] = cfg.length_pool  # resolved by _length_pool: never None here
    return settings


def _given_tokenizer(cfg: TrainConfig) -> Optional[Dict[str, Any]]:
    """The --tokenizer block of ``cfg`` among the resume settings, as spaCy builds it (its settings' defaults filled
    in); None where none was given or it is spaCy's own block of --lang, which reads the same tokens as none (a resume
    with another block is refused before the corpus is read, even where this text gives the same tokens: the model
    would record another tokenizer than the one its first steps read)."""
    if cfg.tokenizer is None:
        return None
    block = filled_tokenizer_settings(cfg.tokenizer)
    return None if block == filled_tokenizer_settings(corpus_data.default_tokenizer_settings(cfg.lang)) else block


def _length_pool(cfg: TrainConfig, saved: Optional[Dict[str, Any]]) -> TrainConfig:
    """``cfg`` with --length-pool resolved (a sentence run's; streams have none): given, it stays (a resume
    that changes it is refused by the settings check); left out, 1 for a new run and the checkpoint's on a
    resume (``saved``: its settings). A sentence checkpoint written before the option recorded none: its
    batches were sorted in pools of :data:`~.sentences.UNRECORDED_POOL`, recorded into ``saved`` here so that
    the resume continues it exactly, and an explicit other value is refused as any changed option is."""
    if not cfg.sentences:
        return cfg
    if saved is not None and saved.get("sentences") is not None:
        saved.setdefault("length_pool", UNRECORDED_POOL)
    if cfg.length_pool is not None:
        return cfg
    pool = saved.get("length_pool", 1) if saved is not None else 1  # a stream checkpoint: refused for its reading
    return replace(cfg, length_pool=pool)


def _resume_settings(cfg: TrainConfig, world: int, new_vocab: bool, vocab: Vocab, model: Dict[str, Any],
                     corpus: Corpus) -> Dict[str, Any]:
    """What must be equal between a run and its resumption for the steps to match.
    Checkpoints written before a key of ``ckpt.ADDED_SETTINGS`` existed resume without it.
    ``new_vocab``: :func:`_build_model`'s (what --new-vocab did, not the flag: checked before the vocabulary)."""
    # The --init vocabulary the run kept (None: built from the corpus): a model replaced at that path is named.
    init_vocab = vocab.digest() if cfg.init and not new_vocab else None
    return {**_run_settings(cfg, world), "new_vocab": new_vocab, "vocab_size": vocab.size, "model_config": model,
            "data": corpus.digest(), "init_vocab": init_vocab}


def _refuse_other_tokenization(cache: Path, stamp: Dict[str, Any], out: Path) -> None:
    """A resume whose tokens differ from the checkpoint's only because the same files were tokenized
    otherwise (another tokenizer of --lang, other token rules, spaCy's rules changed by an upgrade) is refused
    naming both tokenizations."""
    change = tokenization_change(cache, stamp)
    if change is None:
        return

    def describe(tokenization: Optional[Dict[str, Any]]) -> str:
        if tokenization is None:
            return Errors.E_CHECKPOINT_TOKENIZER_UNRECORDED
        rules = tokenization.get("spacy_rules")
        rules = rules[:16] if rules else Errors.E_CHECKPOINT_SPACY_RULES_UNRECORDED
        return Errors.E_CHECKPOINT_TOKENIZATION.format(
            tokenizer=json.dumps(tokenization["tokenizer"], sort_keys=True), rules=tokenization["rules"], spacy_rules=rules
        )

    raise ValueError(Errors.E_CHECKPOINT_TOKENIZER.format(path=out, shell_path=shell_quoted(out), found=describe(change[0]),
                                                         expected=describe(change[1])))


def _check_output_place(out: Path, train_path: Path) -> None:
    """Refuse an OUTPUT_DIR whose files would be read as corpus (inside a TRAIN_PATH directory, not
    hidden) or whose ``data`` entry is not a corpus cache (its files would be mixed with the cache's
    and deleted when a resume replaces it). Checked by every rank before anything is read or written."""
    if train_path.is_dir():
        resolved = out.resolve()
        # Every directory the reader walks, by its real path: also those reached through a linked directory.
        for root, _ in corpus_data.walk_text_dirs(train_path, strict=False):
            real = Path(root).resolve()
            if resolved == real or (real in resolved.parents
                                    and not any(part.startswith(".") for part in resolved.relative_to(real).parts)):
                raise ValueError(Errors.E_OUTPUT_INSIDE_TRAIN_PATH.format(path=out, train_path=train_path))
    cache = out / corpus_data.CACHE_DIR
    if cache.exists() and not cache.is_dir():
        found = Errors.E_CACHE_DIR_IS_FILE
    else:
        names = corpus_data.foreign_entries(cache)
        if not names:
            return
        found = Errors.E_CACHE_DIR_HOLDS.format(n=counted(len(names), "entry", "entries"),
                                                names=listed([name_shown(name) for name in names], 5))
    raise ValueError(Errors.E_CACHE_DIR_NOT_OURS.format(path=cache, found=found))


def _refuse_allennlp_output(out: Path) -> None:
    """Refuse an OUTPUT_DIR that holds AllenNLP weights (an ``export --format allennlp`` directory): the run's
    model would be written beside them, its vocab.txt over theirs, and the directory would load as neither."""
    try:
        found = find_allennlp_files(out) if out.is_dir() else None
    except ValueError:  # not one pair of options and weights (an embeddings .hdf5 alone): no model to hide
        return
    if found is not None:
        raise FileExistsError(Errors.E_OUTPUT_HOLDS_ALLENNLP.format(path=out, shell_path=shell_quoted(out),
                                                                     options=found[0].name, weights=found[1].name))


def _total_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The run's number of steps: --max-steps, or --epochs (default 10) of ``steps_per_epoch``, a finite
    product (``cfg.validate``: epochs at most :data:`MAX_EPOCHS`)."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    return math.ceil((cfg.epochs or DEFAULT_EPOCHS) * steps_per_epoch)


def _model_steps(out: Path) -> Optional[int]:
    """The steps the model in OUTPUT_DIR ``out`` was saved at (its config.json's provenance); None when there is
    none or it cannot be read."""
    try:
        provenance = read_meta(out).get("provenance")
    except (OSError, ValueError):
        return None
    return provenance.get("steps") if isinstance(provenance, dict) else None


def _diverged(step: int, what: str, value: float, out: Path, last_saved: int) -> ValueError:
    """The error of a run whose loss, gradient norm or weights stopped being finite at ``step``
    (``last_saved``: the step of the checkpoint and model in ``out``, 0 when none was written)."""
    kept = restart = ""
    if last_saved:
        kept = Errors.E_TRAINING_DIVERGED_KEPT.format(path=out, last=last_saved)
        restart = Errors.E_TRAINING_DIVERGED_RESTART.format(shell_path=shell_quoted(out))
    return ValueError(Errors.E_TRAINING_DIVERGED.format(step=step, what=what, value=value, kept=kept, restart=restart))


def bar_postfix(tokens_per_s: float, perplexity: float, full_softmax: bool) -> Dict[str, str]:
    """The pretraining bar's postfix: tokens a second, and the window's perplexity (``sampled ppl`` of the sampled
    softmax, ``ppl`` of the full one) shown as the held-out one is (:func:`evaluate.perplexity_shown`): from 1e15
    with an exponent, where e^50 printed 31 characters of thousands separators."""
    from .evaluate import perplexity_shown

    return {"tok/s": f"{tokens_per_s:,.0f}", "ppl" if full_softmax else "sampled ppl": perplexity_shown(perplexity)}


#: The bytes of a file that :func:`_warn_heldout_in_training` compares first: files of one size whose starts differ
#: are no copies, and only the rest are read whole.
HEAD_BYTES = 64 << 10


def _warn_heldout_in_training(heldout: str, train_path: str) -> None:
    """Warn when a file of ``heldout`` is one of TRAIN_PATH's (both exist, read already): the same file by
    device and inode, so a hard link to a training file is one too (its real path is another), as is a symlink;
    or a byte-identical copy of one. Cheap for directories of many files: one ``stat`` a file, and only files
    of a size some file of the other side has are hashed (:func:`file_sha256`, each once), their first
    :data:`HEAD_BYTES` (``split -b`` shards all have one size: their starts differ), whole only where those match;
    empty files never."""
    training = corpus_data.list_text_files(train_path)
    trained = {file_identity(f): f for f in training}
    by_size: Dict[int, List[Path]] = {}
    for f in training:
        by_size.setdefault(os.stat(f).st_size, []).append(f)
    digests: Dict[Tuple[Path, bool], str] = {}

    def digest(f: Path, whole: bool) -> str:
        if (f, whole) not in digests:
            digests[f, whole] = file_sha256(f, None if whole else HEAD_BYTES)
        return digests[f, whole]

    def same_bytes(t: Path, f: Path, size: int) -> bool:
        return digest(t, False) == digest(f, False) and (size <= HEAD_BYTES or digest(t, True) == digest(f, True))

    shared: List[Tuple[Path, Path, str]] = []  # (held-out file, training file, how they are one)
    for f in corpus_data.list_text_files(heldout):
        same = trained.get(file_identity(f))
        if same is not None:
            shared.append((f, same, Warnings.W_HELDOUT_SAME_FILE))
            continue
        size = os.stat(f).st_size
        copied = next((t for t in by_size.get(size, []) if size and same_bytes(t, f, size)), None)
        if copied is not None:
            shared.append((f, copied, Warnings.W_HELDOUT_COPY))
    if shared:
        file, train_file, how = shared[0]
        warnings.warn(
            Warnings.W_HELDOUT_IN_TRAINING.format(path=heldout, n=len(shared), file=file, how=how, train_file=train_file),
            RuntimeWarning,
            stacklevel=3,
        )


def _move_cache_into_place(staging: Path, cache: Path, retired: Path) -> None:
    """Replace the corpus cache ``cache`` by ``staging`` (the old one goes through ``retired``), flushed to the
    disk first: after a power loss, its meta.json (which marks it complete) never names empty token files."""
    with naming(staging):
        sync(staging)
    if cache.exists():
        os.replace(cache, retired)
    os.replace(staging, cache)
    sync_dir(cache.parent)
    shutil.rmtree(retired, ignore_errors=True)


class _Log:
    """JSON-lines log (rank 0). On resume, entries after the checkpoint are dropped:
    they belong to steps that are about to be redone."""

    def __init__(self, path: Path, enabled: bool, resume_step: Optional[int]) -> None:
        self.path = path
        self.enabled = enabled
        if not enabled:
            return
        self.entries: List[Dict[str, Any]] = []  # what a resume kept
        remove_leftovers(path)  # a resume killed while rewriting the log
        if resume_step is not None and path.exists():
            self.entries = [e for e in _parse_log(path) if e.get("step", 0) <= resume_step]
            atomic_write_text(path, "".join(json.dumps(e) + "\n" for e in self.entries))
        elif resume_step is None and path.exists():
            path.unlink()

    def heldout_at(self, step: int, digest: str, mode: str, n_rows: int, rows: str) -> Optional[Dict[str, Any]]:
        """The kept held-out event of ``step`` (a resume) on the text of ``digest`` (:func:`_heldout_digest`), read
        as this run reads it (``mode``; ``n_rows`` and ``rows``: :func:`~.evaluate.heldout_rows`), or None: a resume
        given another --heldout measures that one (older logs, which recorded no digest, too), and so does one whose
        stream is cut into other rows (another ``eval_batch_size``, which can cut as many rows at other places, or
        an event logged under an earlier rule of where rows start, or before the rows' digest was logged: its
        number may not be what this run measures). Every sentence read alone is the same reading whatever the
        batch size: there the text's digest decides (an event logged before ``n_rows`` was is reused too, rather
        than measured again, up to 260 s for the bundled model's held-out text)."""

        def same_reading(e: Dict[str, Any]) -> bool:
            if mode == "per_sentence":
                return e.get("n_rows") in (None, n_rows)
            return e.get("n_rows") == n_rows and e.get(ROWS_DIGEST) == rows

        found = [e for e in self.entries if e.get("event") == "heldout" and e.get("step") == step
                 and e.get(HELDOUT_DIGEST) == digest and e.get("mode") == mode and same_reading(e)]
        return found[-1] if found else None

    def write(self, entry: Dict[str, Any]) -> None:
        if self.enabled:
            with naming(self.path), open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


#: The key of a held-out event of the log that identifies the text it measured.
HELDOUT_DIGEST = "heldout_digest"
#: The key of a held-out event of the log that names the text it measured (``--heldout`` as given).
HELDOUT_PATH = "heldout_path"
#: The key of a held-out event of the log that identifies where the rows it read start (:func:`~.evaluate.row_starts_digest`).
ROWS_DIGEST = "rows_digest"


def _warn_heldout_dropped(log: _Log, out: Path, step: int) -> None:
    """Warn once when a resume without ``--heldout`` continues a run that measured a held-out text: from here on
    it measures none, which said nothing. Named by the last held-out event the resume kept (logs of an older
    spacy-elmo, whose events named no path: the run's start)."""
    measured = [e for e in log.entries if e.get("event") == "heldout"]
    if not measured:
        return
    start = next((e for e in log.entries if e.get("event") == "start"), {})
    path = measured[-1].get(HELDOUT_PATH) or start.get("config", {}).get("heldout")
    warnings.warn(Warnings.W_RESUME_WITHOUT_HELDOUT.format(path=out, heldout=path or "its held-out text",
                                                           shell_heldout=shell_quoted(path) if path else "HELDOUT",
                                                           step=measured[-1].get("step", step)),
                  RuntimeWarning, stacklevel=4)  # train()'s caller


def _heldout_digest(sentences: List[List[str]]) -> str:
    """sha256 of the tokenized held-out text: a resume reuses a logged perplexity only of the same text."""
    return hashlib.sha256(json.dumps(sentences, ensure_ascii=False).encode("utf-8")).hexdigest()


def _parse_log(path: Path) -> List[Dict[str, Any]]:
    """The entries of a JSON-lines log. A last line cut short (the run was killed while
    appending it) is left out; it belongs to a step a resume redoes."""
    lines = [l for l in path.read_text(encoding="utf-8", errors="replace").splitlines() if l.strip()]
    entries = []
    for i, line in enumerate(lines):
        try:
            entries.append(json.loads(line))
        except ValueError:
            if i != len(lines) - 1:
                raise
    return entries


def read_log(output_dir) -> List[Dict[str, Any]]:
    """The entries of ``OUTPUT_DIR/train_log.jsonl``."""
    return _parse_log(Path(output_dir) / LOG_NAME)


@contextmanager
def _same_on_every_rank():
    """The refusals raised inside are the same on every rank (checks of the settings and OUTPUT_DIR that every
    rank makes alike): marked (:func:`raised_on_every_rank`) so that the command line reports them once.
    Only this package's own refusals (a ValueError, TypeError, FileExistsError or FileNotFoundError raised
    here, not caused by another error, and no errno of the OS's): an I/O or memory failure, or a damaged
    file (E_BAD_CHECKPOINT wraps torch's error), may strike one rank alone, which must then say why itself."""
    try:
        yield
    except (ValueError, TypeError, FileExistsError, FileNotFoundError) as err:
        if err.__cause__ is None and getattr(err, "errno", None) is None:
            setattr(err, "spacy_elmo_every_rank", True)  # read by raised_on_every_rank
        raise


def raised_on_every_rank(err: BaseException) -> bool:
    """Whether :func:`train` raised ``err`` alike on every rank (under torchrun rank 0 reports it)."""
    return getattr(err, "spacy_elmo_every_rank", False)


def leave_failed_run(err: BaseException) -> None:
    """Once this rank said ``err``, :func:`train`'s (or left it to the rank that says it): when the run failed
    in a :func:`_settled` block, which every rank knows, wait until every rank got here, then leave the
    process group. torchrun stops the other ranks (SIGTERM) when the first one exits: a rank still saying
    its error could be cut short; and a process that exits in the group, its peers gone, can abort
    ("terminate called without an active exception", SIGABRT). Any other error: nothing (a peer may be gone).
    A rank whose failure escaped the command line (an error it does not catch: a traceback) never comes: its
    exit breaks the barrier, and this rank exits as before. A peer hung but alive is waited for
    :data:`LEAVE_TIMEOUT` at most: the command line, which ignores Ctrl-C and SIGTERM meanwhile, exits right after."""
    group = next((getattr(e, _SETTLED) for e in (err, err.__cause__) if hasattr(e, _SETTLED)), None)
    if group is not None and dist.is_initialized():
        # gloo's "Connection closed by peer" (that rank is gone) or its timeout (that rank hangs)
        with suppress(RuntimeError):
            dist.barrier(group=group)
            dist.destroy_process_group()


def _lost_peer(err: RuntimeError) -> bool:
    """Whether ``err``, raised by a collective of the run, is the process group's: a peer process of the job gone
    (gloo: "Connection closed by peer" / "reset by peer", as ``RuntimeError``; NCCL: ``DistBackendError``) or not
    answering, not one of this rank's own. (:class:`PeerFailed`, which names the rank that failed, is neither: no
    ``DistError``, and its message never names gloo.)"""
    return isinstance(err, dist.DistError) or "gloo" in str(err)


@contextmanager
def _peer_loss_said(world: int, rank: int, out: Path, last_saved: Callable[[], Optional[int]]) -> Iterator[None]:
    """Within: a peer process of the job gone (:func:`_lost_peer`) is said as :func:`_peer_died` says it, gloo's words
    alone naming no process and no way on: from the set-up's first collective once the process group is up (a peer
    killed while rank 0 tokenizes, at the held-out text's broadcast, in DDP's) through the loop's to the last save's.
    An error of this rank ``rank``'s own (an I/O error, CUDA out of memory), which its peers meet as a peer gone, is
    recorded in torchrun's store as it leaves (:func:`~.jobstore.record_failure`), so that they name this rank.
    ``world``: the processes (1: nothing to lose); ``last_saved()``: the step of the checkpoint in OUTPUT_DIR ``out``
    where this rank knows it (:func:`_peer_died`'s ``last_saved``), read as the error comes."""
    try:
        yield
    except Exception as err:
        if world > 1 and isinstance(err, RuntimeError) and _lost_peer(err):
            raise RuntimeError(_peer_died(err, out, last_saved(), failed_rank())) from err
        if world > 1 and not isinstance(err, PeerFailed):  # before this process ends, which its peers meet
            record_failure(rank)
        raise


def _peer_died(err: RuntimeError, out: Path, last_saved: Optional[int], failed: Optional[int] = None) -> str:
    """The message of a run whose peer process died mid-run, in the set-up or the loop (``err``: gloo's or NCCL's
    error): how to go on, as a full disk says it, by whether OUTPUT_DIR ``out`` holds a checkpoint (written
    atomically: whole if there). ``last_saved``: the step of that checkpoint where this rank knows it (rank 0, which
    writes it), else None: another rank counts a save once the collective ending it passes, and rank 0 may have died
    after writing it. ``failed``: the rank that recorded its own error as it failed (:func:`~.jobstore.failed_rank`):
    named, where its error is said (gloo's words about it, then, are no news); None: killed or none recorded."""
    if not ckpt.checkpoint_path(out).exists():
        saved = ""
    elif last_saved:
        saved = Errors.E_PEER_DIED_CHECKPOINT.format(step=last_saved, path=out)
    else:
        saved = Errors.E_PEER_DIED_CHECKPOINT_IN.format(path=out)
    if failed is not None:
        return Errors.E_PEER_FAILED_MID_RUN.format(rank=failed, saved=saved, on=_how_to_go_on(out))
    return Errors.E_PEER_DIED.format(error=str(err).rstrip(), saved=saved, on=_how_to_go_on(out))


def _how_to_go_on(out: Path) -> str:
    """How a run stopped by a failure that is not its settings' goes on: ``--resume`` where OUTPUT_DIR ``out`` holds
    a checkpoint (written atomically: whole if there), else the same command again."""
    return Errors.E_PRETRAIN_NO_SPACE_RESUME if ckpt.checkpoint_path(out).exists() else Errors.E_PRETRAIN_NO_SPACE_RERUN


def said_by_this_rank(err: BaseException, rank: int) -> bool:
    """Whether rank ``rank`` says ``err``, :func:`train`'s, under torchrun: not an error every rank met
    alike (rank 0 says it, or the lowest rank that met it: :func:`_settled`), nor another rank's failure
    (:class:`PeerFailed`: that rank says it, and rank 0 names it, the terminal of a job of several machines
    showing rank 0's words alone)."""
    if isinstance(err, PeerFailed):
        return rank == 0
    return rank == 0 or not raised_on_every_rank(err)


# -- the loop ----------------------------------------------------------------
def train(cfg: TrainConfig, on_step: Optional[Callable[[int, float], None]] = None) -> Dict[str, Any]:
    """Run (or resume) pretraining; returns a summary: ``steps`` (the step the model is at), ``resumed_from``
    (the checkpoint's step with ``--resume``, else 0), ``model_written`` (False: a resume that trained nothing
    left the model as it was), ``vocab_size``, ``corpus``, ``heldout``, ``output_dir``, ``rank``. ``on_step(step, loss)`` is called after every optimizer step (step counts from 1)."""
    try:
        # until the run ends: OUTPUT_DIR's lock (from before the corpus is read), the prefetcher, a lost peer said
        with ExitStack() as held:
            return _train(cfg, on_step, held)
    except OSError as err:
        out = Path(cfg.output_dir)
        if err.errno in NOT_PERMITTED and names_a_file_in(err, out, above=True):  # the bare errno said no fix
            named = named_paths(err)[0]
            if err.errno != errno.EROFS and named.exists() and not named.is_dir():  # its mode, not a new file refused
                raise PermissionError(
                    Errors.E_OUTPUT_FILE_REFUSED.format(file=named, path=out, parent=named.parent, error=err)
                ) from err
            raise PermissionError(Errors.E_OUTPUT_NOT_WRITABLE.format(path=out, parent=_refusing_dir(err), error=err)) from err
        if not out_of_space(err, out):  # another disk's (a full /dev/shm)
            raise
        raise OSError(Errors.E_PRETRAIN_NO_SPACE.format(path=out, error=err, on=_how_to_go_on(out))) from err


def _refusing_dir(err: OSError) -> Path:
    """The directory that refused the write ``err`` names: the nearest existing directory at or above its path
    (``out`` for ``out/data``, which could not be created; ``a`` for ``a/b`` of OUTPUT_DIR ``a/b/c``)."""
    path = named_paths(err)[0]
    return next((p for p in (path, *path.parents) if p.is_dir()), path)


#: The errnos of a write refused: no write permission (EACCES), an immutable directory or a sandbox (EPERM), a
#: read-only mount (EROFS).
NOT_PERMITTED = {errno.EACCES, errno.EPERM, errno.EROFS}


@contextmanager
def _output_dir_lock(out: Path):
    """An exclusive ``flock`` on the directory OUTPUT_DIR itself (no file is added; the kernel releases it when
    the process ends, also by SIGKILL), held by rank 0 while the run reads and writes there: a second pretrain
    into the same directory (another terminal, a job started again while the first runs) mixed its cache,
    checkpoints and log with the first's, or failed on the first's half-written files.

    Taken before OUTPUT_DIR is checked or read (a run ending between the checks and the lock was overwritten).
    An OUTPUT_DIR this run created (with its parents) is removed again when the run fails leaving it empty."""
    created = make_dirs(out)
    fd = os.open(out, os.O_RDONLY)
    try:
        warn_if_not_locked(_lock(fd, out, Errors.E_OUTPUT_IN_USE), out, "OUTPUT_DIR", "pretrain")
        try:
            yield
        except BaseException:
            remove_empty_dirs(created)
            raise
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def model_dir_lock(directory: Path, in_use: str, name: str, command: str) -> Iterator[None]:
    """pretrain's lock on OUTPUT_DIR (:func:`_output_dir_lock`), held by a command that rewrites a file of the model
    in ``directory`` (``fit-state``, ``export`` replacing the directory): FileExistsError ``in_use`` (the command's
    message, formatted with ``path``) while a pretrain runs there, which rewrites the model at every checkpoint;
    a pretrain started meanwhile is refused. A lock left by a process that ended (even by SIGKILL) is none: the
    kernel released it. Not locked where there is no flock (Windows); a file system without flock (some network
    mounts) is warned of as pretrain warns (:func:`~spacy_elmo.atomic.warn_if_not_locked`: ``directory`` is
    ``command``'s argument ``name``)."""
    if fcntl is None:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        warn_if_not_locked(_lock(fd, directory, in_use), directory, name, command,
                           rival=f"a pretrain (or a second {command})")
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, directory: Path, in_use: str) -> Optional[OSError]:
    """Take an exclusive ``flock`` on ``fd`` (the directory ``directory``) without waiting
    (:func:`~spacy_elmo.atomic.try_lock`): FileExistsError ``in_use`` when another process holds it; the OSError
    of a file system without flock, which locks nothing (None: locked)."""
    try:
        return try_lock(fd)
    except BlockingIOError:
        raise FileExistsError(in_use.format(path=directory, shell_path=shell_quoted(directory))) from None


def _train(cfg: TrainConfig, on_step: Optional[Callable[[int, float], None]], held: ExitStack) -> Dict[str, Any]:
    from ..progress import progress_bar

    with _same_on_every_rank():  # the settings alone, the same on every rank: checked before the process group starts
        cfg.validate()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    rank, world, device = _setup_distributed(cfg)
    out = Path(cfg.output_dir)
    is_main = rank == 0
    wait = _wait_groups(world)
    last_saved = 0  # the step of the checkpoint in OUTPUT_DIR that this run wrote (0: none; a resumed one: below)
    # Until the run ends (``held`` is left as train() returns or raises): a peer that dies is said as such.
    held.enter_context(_peer_loss_said(world, rank, out, lambda: last_saved if is_main else None))
    _refuse_shared_gpu(wait, device)  # before OUTPUT_DIR is made and the corpus tokenized
    # Every rank learns rank 0's verdict (its lock, OUTPUT_DIR not empty) before any rank goes on.
    # Files each rank reads itself (--init, OUTPUT_DIR) are checked once the group is up: a rank of another machine
    # that finds no such file says so, and rank 0 names that rank (before the group, its exit left rank 0 waiting).
    with _settled(wait, setup=True), _same_on_every_rank():
        if cfg.init:  # a missing or unloadable --init is refused before OUTPUT_DIR is made and the corpus tokenized
            check_init_model(cfg.init)
        if out.exists() and not out.is_dir():
            raise ValueError(Errors.E_OUTPUT_NOT_A_DIR.format(path=out))
        if is_main and fcntl is not None:  # before anything in OUTPUT_DIR is checked, read or written
            held.enter_context(_output_dir_lock(out))
        _check_output_place(out, Path(cfg.train_path))
        _refuse_allennlp_output(out)
        payload = ckpt.load_checkpoint(out) if cfg.resume else None
        cfg = _length_pool(cfg, None if payload is None else payload["settings"])
        if payload is not None:
            # What does not depend on the corpus is refused before the corpus is read.
            ckpt.check_settings(payload["settings"], _run_settings(cfg, world), out)
        elif is_main and (ckpt.checkpoint_path(out).exists() or (out / "config.json").exists()):
            # torchrun --max-restarts runs the same command again, without --resume: perhaps the first attempt's
            # checkpoint, perhaps an older run's (as the first attempt found it): the message says both ways on
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            restarted = attempt not in ("", "0") and "TORCHELASTIC_RUN_ID" in os.environ
            if restarted:
                raise FileExistsError(Errors.E_OUTPUT_NOT_EMPTY_RESTARTED.format(path=out, attempt=attempt))
            raise FileExistsError(Errors.E_OUTPUT_NOT_EMPTY.format(path=out))
    here = torchrun_ranks()
    if here.local == 0 and payload is None and not cfg.init:  # new sizes (a resume's or --init's were built before)
        # once per machine, for all its processes
        _warn_model_past_memory(requested_model(cfg), cfg.optimizer, device, machine_processes(here))
    if is_main and cfg.init and payload is None and not cfg.sentences and recorded_reading(cfg.init) == "sentences":
        # Said as the run begins: a sentence model (the bundled default) fine-tuned on streams became a stream
        # model without a word, and evaluate then read it as one by default. The other way round is a choice
        # the README describes (a stream model fine-tuned with --sentences, as the bundled model's stage 2).
        warnings.warn(Warnings.W_INIT_READS_SENTENCES.format(path=cfg.init), RuntimeWarning, stacklevel=2)

    heldout = None
    nlp = None  # rank 0's pipeline (make_nlp), built once for the held-out text and the corpus
    if cfg.heldout:  # read now: a bad file is an error before any training, not at the first checkpoint
        from .evaluate import read_text

        # Rank 0 tokenizes; every rank evaluates its share of it at the checkpoints.
        read: List[Any] = [None]
        with _settled(wait, setup=True):
            if is_main:
                nlp = corpus_data.make_nlp(cfg.lang, tokenizer=cfg.tokenizer)
                read[0] = read_text(cfg.heldout, cfg.lang, cfg.progress, nlp=nlp)  # rank 0's, broadcast below
                _warn_heldout_in_training(cfg.heldout, cfg.train_path)
        if world > 1:
            assert wait is not None  # _wait_groups made them for more than one process
            dist.broadcast_object_list(read, src=0, group=wait.setup)
        heldout, heldout_stats = read[0]
        heldout_digest = _heldout_digest(heldout)

    # Data: rank 0 tokenizes into the cache, the others wait and read it. A resume that
    # needs a new cache builds it beside data/ and moves it in only once the checkpoint
    # accepted it: a refused resume leaves OUTPUT_DIR as it was.
    cache, staging = out / corpus_data.CACHE_DIR, out / STAGING_NAME
    try:
        with _settled(wait, setup=True):  # however long rank 0 tokenized
            if is_main:
                for leftover in (staging, out / RETIRED_NAME):  # a run killed while staging or swapping
                    shutil.rmtree(leftover, ignore_errors=True)
                ckpt.remove_leftovers(out)  # a run killed while writing a checkpoint
                # one pipeline for the freshness check and the tokenization (the held-out text's, where it was read)
                if nlp is None:
                    nlp = corpus_data.make_nlp(cfg.lang, tokenizer=cfg.tokenizer)
                # the reused cache's meta.json, read once (it holds a digest per file of the corpus); None: tokenize
                reused = current_meta(cache, fingerprint(cfg.train_path, cfg.lang, nlp))
                # A resume reads the text once more to hash it: an edit that kept the sizes and times is other text.
                if reused is not None and payload is not None and not same_text(cache, reused):
                    reused = None
                # a resume's new cache is staged, moved in once the checkpoint accepted it
                meta = reused if reused is not None else build_corpus(
                    cfg.train_path, cfg.lang, staging if payload is not None else cache, progress=cfg.progress, nlp=nlp,
                    processes=cfg.tokenize_processes)
        # Each rank reads the cache (another machine's ranks may fail to) and builds its model.
        with _settled(wait, setup=True):
            source = staging if (staging / "meta.json").exists() else cache
            try:
                if not is_main:
                    try:
                        meta = read_json_file(source / "meta.json", "{error}", Errors.E_JSON_NOT_OBJECT)
                    except ValueError as err:  # rank 0 wrote it whole (atomically): this rank reads another file
                        raise FileNotFoundError(f"{source / 'meta.json'}: {err}") from err
                corpus = Corpus.load(source)
            # rank 0 wrote it: this rank's machine does not see rank 0's OUTPUT_DIR, or this rank's user may not read it
            # (a PermissionError was said in the OS's words alone)
            except OSError as err:
                if is_main:
                    raise
                unread = type(err) if isinstance(err, (FileNotFoundError, PermissionError)) else OSError
                readable = Errors.E_CACHE_NOT_SHARED_READABLE if isinstance(err, PermissionError) else ""
                raise unread(Errors.E_CACHE_NOT_SHARED.format(rank=rank, path=out, error=err, readable=readable)) from err

            torch.manual_seed(cfg.seed)  # same initial weights on every rank (DDP also broadcasts)
            batcher: Union[SentenceBatcher, StreamBatcher]
            # Every rank read the same cache and --init: a vocabulary --min-count leaves empty, or a corpus too
            # small for --batch-size x the processes, is refused by every rank alike (said once, by rank 0).
            with _same_on_every_rank():
                bilm, softmax, vocab, corpus, new_vocab = _build_model(cfg, corpus, payload, is_main)
                if cfg.sentences:
                    assert cfg.length_pool is not None  # _length_pool resolved it
                    # A checkpoint recording no padded epochs dropped each epoch's last batches: kept, to resume exactly.
                    pad = payload is None or payload["settings"].get(ckpt.PADDED_EPOCHS, False)
                    batcher = SentenceBatcher(corpus, cfg.batch_size, cfg.max_length, cfg.seed, rank, world, cfg.length_pool,
                                              pad=pad)
                else:
                    batcher = StreamBatcher(corpus, cfg.batch_size, cfg.unroll, cfg.seed, rank, world)
                total = _total_steps(cfg, batcher.steps_per_epoch)
            bilm.lstm.dropout = cfg.dropout
            char_table = CharTable(vocab, bilm.config.max_characters_per_token)
            lm = BidirectionalLM(bilm, softmax).to(device)
            optimizer = build_optimizer(cfg.optimizer, cfg.lr, lm.parameters())
            settings = _resume_settings(cfg, world, new_vocab, vocab, bilm.config.to_dict(), corpus)
            if isinstance(batcher, SentenceBatcher):
                settings[ckpt.PADDED_EPOCHS] = batcher.pad
            sampler = LogUniformSampler(vocab.size, cfg.negatives)
            full_softmax = cfg.negatives >= vocab.size
            if full_softmax and is_main:
                warnings.warn(Warnings.W_NEGATIVES_CLAMPED.format(negatives=cfg.negatives, vocab=vocab.size), RuntimeWarning, stacklevel=3)  # train()'s caller
            sampler_rng = torch.Generator().manual_seed(cfg.seed * 1009 + rank)
            torch.manual_seed(cfg.seed * 7919 + rank)  # dropout streams differ per rank
            state = None
            step = 0
            tokens_seen = 0
            if payload is not None:
                with _same_on_every_rank():  # every rank read the same cache
                    if source == staging and payload["settings"].get("data", settings["data"]) != settings["data"]:
                        _refuse_other_tokenization(cache, meta["fingerprint"], out)
                    ckpt.check_settings(payload["settings"], settings, out)
                    if cfg.model and requested_model(cfg) != bilm.config:
                        raise ValueError(Errors.E_RESUME_MODEL.format(path=out, found=bilm.config.to_dict(),
                                                                      expected=requested_model(cfg).to_dict()))
                lm.load_state_dict(payload["model"])
                load_optimizer_state(optimizer, payload["optimizer"])
                step = int(payload["step"])
                tokens_seen = int(payload.get("tokens", step * cfg.batch_size * cfg.unroll * world))  # older checkpoints: streams
                state = ckpt.restore_rank_state(payload["ranks"][rank], sampler_rng, device)
                if state is not None:  # as saved: a CUDA AMP run's h is bfloat16, which the CPU would refuse
                    state = bilm.lstm.carry(state, device)
    except BaseException:
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    with _settled(wait, setup=True):  # every rank has read the staged cache
        if is_main and source == staging:
            _move_cache_into_place(staging, cache, out / RETIRED_NAME)
        log = _Log(out / LOG_NAME, is_main, step if payload is not None else None)
        if is_main:  # a resume is recorded as a start is: its step (the checkpoint's), settings and corpus
            log.write({"event": "start" if payload is None else "resume", "step": step, "world": world,
                       "steps_per_epoch": batcher.steps_per_epoch, "total_steps": total, "vocab_size": vocab.size, "corpus": meta["stats"], "config": asdict(cfg)})
        if is_main and payload is not None and cfg.heldout is None:
            _warn_heldout_dropped(log, out, step)
    model: torch.nn.Module = lm
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(lm, device_ids=[device.index] if device.type == "cuda" else None)

    provenance = {"trained_by": PRETRAINED_BY, "lang": cfg.lang, "tokenizer": meta.get("tokenizer"),
                  "vocab_size": vocab.size,
                  "reading": "sentences" if cfg.sentences else "streams",  # evaluate's default mode
                  # absolute: a relative path named nothing once the model left the directory it was run from
                  "train_path": str(Path(cfg.train_path).resolve()),
                  "init": cfg.init if cfg.init in (None, "", "default") else str(Path(cfg.init).resolve())}
    use_amp = device.type == "cuda"
    bar = progress_bar(total=total, initial=step, desc="pretraining", unit="step", disable=not (cfg.progress and is_main))
    # Closed on every way out (Ctrl-C, SIGTERM, an error): its last line is drawn before the CLI's message, not
    # after it when the bar is collected. Closing twice (the loop's end closes it) draws nothing.
    held.callback(bar.close)
    last_heldout = None
    last_saved = step  # the step of the checkpoint in OUTPUT_DIR (0: none)

    def save(final: bool) -> None:
        nonlocal last_saved
        # A step can leave a finite loss and gradient but weights that are not (an lr too large for them):
        # never written over the last good checkpoint. The ranks' weights are equal: every rank refuses alike.
        for p in lm.parameters():
            found = p.detach()[~torch.isfinite(p.detach())]
            if found.numel():
                with _same_on_every_rank():
                    raise _diverged(step, "a weight", float(found[0]), out, last_saved)
        ranks = [ckpt.rank_state(prefetcher.boundary_state(), state, device)]
        if world > 1:
            gathered: List[Any] = [None] * world
            dist.all_gather_object(gathered, ranks[0])
            ranks = gathered
        with _settled(wait):  # rank 0 writes (a full disk fails it alone)
            if is_main:
                ckpt.save_checkpoint(out, {"step": step, "tokens": tokens_seen, "model": lm.state_dict(),
                                           "optimizer": optimizer.state_dict(), "ranks": ranks, "settings": settings})
                # Whole on disk from here: a peer lost in the collective that ends this save is said with this step.
                last_saved = step
                # Training reads streams with carried states and never uses the initial
                # state; fitting it (eval mode, no randomness) leaves resumption exact.
                start = fit_start_state(bilm, corpus, cfg.state_sentences)
                fitted = out / INITIAL_STATE_NAME
                if start is None and fitted.exists():  # the save removes it: once (the next saves find none)
                    warnings.warn(Warnings.W_RESUME_REMOVES_INITIAL_STATE.format(path=fitted, step=step, out=out,
                                                                                  shell_out=shell_quoted(out)),
                                  RuntimeWarning, stacklevel=2)
                save_pretrained(out, bilm, softmax, vocab, dict(provenance, steps=step), initial_state=start)
        last_saved = step

    def evaluate_heldout() -> Dict[str, Any]:
        """Held-out perplexity of the model now, every rank evaluating its share; logged, and with progress
        shown, printed on a line of its own above the bar (rank 0). Eval mode draws no random numbers."""
        from .evaluate import evaluate_sentences, json_ready, perplexity_text

        assert heldout is not None  # called only with --heldout
        # Its bar, below the pretraining bar (and gone when done: leave=None), shows the wait: 260 s a checkpoint
        # for the bundled model's 53,731 held-out tokens, where the pretraining bar stood still.
        result = evaluate_sentences(lm, vocab, heldout, cfg.eval_batch_size, cfg.unroll, device, progress=cfg.progress and is_main,
                                    per_sentence=cfg.sentences, rank=rank, world=world)
        result["replaced_bytes"] = heldout_stats.replaced_bytes
        with _settled(wait):
            log.write({"step": step, "event": "heldout", **json_ready(result), HELDOUT_DIGEST: heldout_digest,
                       ROWS_DIGEST: heldout_reading[1], HELDOUT_PATH: cfg.heldout})
        if cfg.progress and is_main:  # the evaluation's own bar is gone: the value stays on the screen (or log)
            when = f"step {step:,}" if step else "step 0 (before training)"
            bar.write(f"{when}: held-out {perplexity_text(result)}", file=sys.stderr)
        lm.train()
        return result

    if heldout is not None:  # how this run reads the held-out text (its rows' count and starts): alike at every step
        from .evaluate import heldout_rows

        heldout_reading = heldout_rows(vocab, heldout, cfg.eval_batch_size, cfg.sentences)
    if payload is not None and heldout is not None:
        # A run killed after writing its checkpoint but before logging that step's held-out
        # perplexity: measure it now, as the straight run did.
        from .evaluate import from_json_ready

        last_heldout = None
        if is_main:
            mode = "per_sentence" if cfg.sentences else "stream"
            last_heldout = log.heldout_at(step, heldout_digest, mode, *heldout_reading)
        missing = [last_heldout is None]
        if world > 1:  # rank 0's log decides: the evaluation is collective
            dist.broadcast_object_list(missing, src=0)
        if missing[0]:
            last_heldout = evaluate_heldout()
        elif is_main and last_heldout is not None:  # rank 0 found it in the log: a null perplexity is inf, as measured
            last_heldout = from_json_ready(
                {k: v for k, v in last_heldout.items() if k not in ("step", "event", HELDOUT_DIGEST, ROWS_DIGEST, HELDOUT_PATH)})
            last_heldout.setdefault("n_rows", heldout_reading[0])  # a per-sentence event logged before n_rows was
    elif heldout is not None and cfg.init and has_softmax(cfg.init):
        # A fine-tuning run's starting point, logged as step 0: whether fine-tuning helps is read against it (the
        # --init model as this run reads the text: its vocabulary, --sentences or streams, and the zero start state it
        # trains from). Once, in a new run only: a resume keeps the log's step-0 line, as it keeps every step's up to
        # its checkpoint. Not without --init, nor with an --init without a softmax (AllenNLP or bilm-tf weights, a
        # BiLM.save directory: _build_model gave it a random one): a random softmax's perplexity is about the
        # vocabulary size, costing time and telling nothing. has_softmax reads the safetensors headers alone, as
        # _build_model just read them. Every rank evaluates its share (payload and cfg.init are alike on every rank).
        last_heldout = evaluate_heldout()

    # The first window starts after the resume's held-out evaluation: its tok/s is training's alone.
    window_loss, window_n, window_tokens, window_start = 0.0, 0, 0, time.perf_counter()
    lm.train()
    # Each step's host-side inputs (char encoding, targets, the sampler's draw) are prepared one step ahead on
    # a thread (cfg.prefetch; by default on a GPU), in the same order as without: the same losses, bit for bit.
    pin = device.type == "cuda"

    def prepare(at: int) -> StepInputs:
        epoch, k = divmod(at, batcher.steps_per_epoch)
        return prepare_step(batcher.batch(epoch, k), vocab, char_table, None if full_softmax else sampler, sampler_rng, pin)

    background = prefetch_default(device) if cfg.prefetch is None else cfg.prefetch
    prefetcher = held.enter_context(StepPrefetcher(prepare, sampler_rng, total, background, device))  # stopped on every way out
    while step < total:
        epoch, k = divmod(step, batcher.steps_per_epoch)
        host = prefetcher.get(step)
        if k == 0:
            state = None  # a new epoch reshuffles the streams: nothing to carry
        if isinstance(batcher, SentenceBatcher):  # cfg.sentences: every row a sentence from the start state, as the component reads them
            state = bilm.start_state(host.lengths.shape[0], lm.softmax.weight)
        inputs = host.to(device)  # from the main thread: non-blocking from pinned memory on CUDA
        # Corpus tokens the step reads (each by both LMs): bilm-tf's count and
        # benchmarks/pretrain.py's, so the bar, the log and the benchmark agree.
        n_targets = host.n_targets
        step_tokens = n_targets * world
        if world > 1 and cfg.sentences:  # the ranks' batches differ in length: count every rank's targets
            count = torch.tensor([float(n_targets)], dtype=torch.float64, device=device)
            dist.all_reduce(count)
            step_tokens = int(count.item())
        # The LSTM reads the host's lengths: on a GPU its op checks them there and copies them over without a
        # host sync, where device lengths cost one per layer, forward and backward (csrc/cuda/cuda_ops.cpp).
        # Not through DDP, which copies host tensors to the GPU (waiting for it) before the forward.
        lengths = host.lengths if model is lm else inputs.lengths
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_amp):
            res = model(inputs.chars, inputs.index_fwd, inputs.index_bwd, inputs.targets_fwd, inputs.targets_bwd,
                        lengths, state, inputs.sample, sampler, inputs.logq, inputs.positions)
        # The mean over every rank's targets (padding is zero): DDP averages the ranks' gradients,
        # so each rank divides its sum by the mean count per rank, and a target weighs the same
        # whichever rank's batch it is in.
        per_rank = step_tokens / world
        loss_f, loss_b = res.nll_fwd.sum() / per_rank, res.nll_bwd.sum() / per_rank
        loss = (loss_f + loss_b) / 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(lm.parameters(), cfg.clip)
        optimizer.step()
        state = (res.state[0].detach(), res.state[1].detach())
        step += 1
        stats = torch.stack([loss.detach(), loss_f.detach(), loss_b.detach()]).double()
        if world > 1:
            dist.all_reduce(stats)
            stats /= world
        # One transfer (one host sync on a GPU) for the losses and the gradient norm (float32 in float64: exact)
        stats = torch.cat([stats, grad_norm.detach().double().reshape(1)]).cpu()
        tokens_seen += step_tokens
        step_loss, step_norm = float(stats[0]), float(stats[3])
        # The loss is the ranks' mean and the gradient norm that of the all-reduced gradients: every rank stops alike,
        # before this step is logged or checkpointed.
        for what, value in (("the loss", step_loss), ("the gradient norm", step_norm)):
            if not math.isfinite(value):
                with _same_on_every_rank():
                    raise _diverged(step, what, value, out, last_saved)
        window_loss += step_loss
        window_n += 1
        window_tokens += step_tokens
        if on_step is not None:
            on_step(step, step_loss)
        checkpoint = step % cfg.checkpoint_every == 0 or step == total
        # Every checkpoint step is logged too: each line's window is the steps since the line before (window_steps),
        # none lost to the window restarting at a checkpoint, and a resume starts its first window where the
        # straight run's restarted (the checkpoint), so both log the same lines.
        if step % cfg.log_every == 0 or checkpoint:
            elapsed = time.perf_counter() - window_start
            tps = window_tokens / max(elapsed, 1e-9)
            # exp of the window's training loss: of the sampled softmax, far below the full-softmax perplexity with few
            # negatives (201.3 in full: 165.6 with 8,192, 11.3 with 64), so named so; --heldout and evaluate give the full one.
            ppl = math.exp(min(window_loss / window_n, 50.0))
            with _settled(wait):  # rank 0 appends (a full disk fails it alone)
                log.write({"step": step, "epoch": epoch, "loss": step_loss, "loss_forward": float(stats[1]),
                           "loss_backward": float(stats[2]), "sampled_perplexity": ppl, "grad_norm": step_norm,
                           "tokens": tokens_seen, "tokens_per_s": tps, "window_steps": window_n, "time": time.time()})
            bar.set_postfix(bar_postfix(tps, ppl, full_softmax), refresh=False)
            window_loss, window_n, window_tokens, window_start = 0.0, 0, 0, time.perf_counter()
        bar.update(1)
        if checkpoint:
            save(final=step == total)
            if heldout is not None:
                last_heldout = evaluate_heldout()
            window_start = time.perf_counter()  # tok/s without the checkpoint's time (the window is empty: logged above)
    bar.close()
    if payload is not None and step == int(payload["step"]):
        # Nothing trained: the files stay as they are, unless a kill between the checkpoint and the model that
        # follows it left the model of an earlier step (its config.json, written last, records the steps).
        model_step = _model_steps(out) if is_main else None
        stale = [is_main and model_step != step]
        if world > 1:  # rank 0's files decide: saving is collective
            dist.broadcast_object_list(stale, src=0)
        if stale[0]:
            save(final=True)
        if is_main:  # a resume at or below the checkpoint rewrote both files, saying only "0 steps this run"
            option = "--max-steps" if cfg.max_steps is not None else "--epochs"
            message = Warnings.W_RESUME_NOTHING_TO_TRAIN_STALE if stale[0] else Warnings.W_RESUME_NOTHING_TO_TRAIN
            left = "no model" if model_step is None else f"the model of step {model_step:,}"
            warnings.warn(message.format(path=out, step=step, total=total, option=option, model=left),
                          RuntimeWarning, stacklevel=3)  # train()'s caller
    written = payload is None or step != int(payload["step"]) or stale[0]
    return {"steps": step, "resumed_from": 0 if payload is None else int(payload["step"]), "model_written": written, "vocab_size": vocab.size, "corpus": meta["stats"], "heldout": last_heldout,
            "output_dir": str(out), "rank": rank}
