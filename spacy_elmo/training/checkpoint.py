"""Training checkpoints: one file, written atomically (temp file, then rename).

Holds everything the next step depends on: model + softmax weights, the
optimizer state, the step, and per rank the RNG states (dropout, sampler) and
the carried LSTM states. Loaded with ``weights_only=True`` (no arbitrary pickle).
"""

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch

from .._typing import PathLike
from ..atomic import atomic_write
from ..atomic import remove_leftovers as atomic_remove_leftovers
from ..bilm.native_io import read_meta, torch_load_error
from ..errors import Errors, counted
from ..paths import shell_quoted

CHECKPOINT_NAME = "checkpoint.pt"


def checkpoint_path(output_dir: PathLike) -> Path:
    return Path(output_dir) / CHECKPOINT_NAME


def rank_state(sampler_state: torch.Tensor, lstm_state, device: torch.device) -> Dict[str, Any]:
    """This process's RNG states and carried LSTM state, on CPU. ``sampler_state``: the sampler generator's
    state as of the step boundary (:meth:`~.prefetch.StepPrefetcher.boundary_state`: before any draw made
    ahead for the next step), the state a resume draws that step from."""
    state: Dict[str, Any] = {"torch_rng": torch.get_rng_state(), "sampler_rng": sampler_state}
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(device)
    if lstm_state is not None:
        state["lstm_h"], state["lstm_c"] = lstm_state[0].detach().cpu(), lstm_state[1].detach().cpu()
    return state


def restore_rank_state(state: Dict[str, Any], sampler_rng: torch.Generator, device: torch.device):
    """Restore RNGs; return the carried LSTM state (on ``device``) or None."""
    torch.set_rng_state(state["torch_rng"])
    sampler_rng.set_state(state["sampler_rng"])
    if device.type == "cuda" and "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    if "lstm_h" in state:
        return state["lstm_h"].to(device), state["lstm_c"].to(device)
    return None


def save_checkpoint(output_dir: PathLike, payload: Dict[str, Any]) -> None:
    """Write ``checkpoint.pt`` atomically: a kill (or a power loss: :func:`~spacy_elmo.atomic.atomic_write` flushes it
    to the disk) leaves the old or the new file, never half.
    An exception (Ctrl-C) removes the temporary file; :func:`remove_leftovers` removes what a SIGKILL left."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            try:
                torch.save(payload, f)
            except RuntimeError as err:
                # Ctrl-C or SIGTERM during a write: torch's zip writer then fails to close the archive
                # ("unexpected pos"), and that error hid the interrupt (pretrain exited 1, not 130 / 143).
                if isinstance(err.__context__, KeyboardInterrupt):
                    raise err.__context__ from None
                # A full disk likewise: the OSError (ENOSPC) the zip writer met, not its "unexpected pos".
                if isinstance(err.__context__, OSError):
                    raise err.__context__ from None
                raise

    atomic_write(checkpoint_path(output_dir), write)


def remove_leftovers(output_dir: PathLike) -> None:
    """Delete the temporary files of checkpoint writes that were killed before their rename
    (as large as the checkpoint; hidden, so nobody else would find them)."""
    path = checkpoint_path(output_dir)
    atomic_remove_leftovers(path)
    for stale in path.parent.glob(f".{CHECKPOINT_NAME}.tmp*"):  # the name before atomic_write was used
        if stale.name[len(CHECKPOINT_NAME) + 5:].isdigit():
            stale.unlink(missing_ok=True)


PAYLOAD_KEYS = ("step", "model", "optimizer", "ranks", "settings")


def load_checkpoint(output_dir: PathLike) -> Dict[str, Any]:
    """The payload of ``checkpoint.pt``; ValueError naming the file when it is damaged."""
    path = checkpoint_path(output_dir)
    if not path.exists():
        raise FileNotFoundError(Errors.E_NO_CHECKPOINT.format(path=output_dir))
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises EOFError, RuntimeError, UnpicklingError... for damaged files
        # not torch's advice to load it with weights_only=False (arbitrary code from the file) or to file an issue
        raise ValueError(Errors.E_BAD_CHECKPOINT.format(path=path, error=torch_load_error(err))) from err
    missing = [k for k in PAYLOAD_KEYS if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise ValueError(Errors.E_BAD_CHECKPOINT.format(path=path, error=f"no {', '.join(missing)}"))
    provenance = {} if "init" in payload["settings"] else _saved_model_provenance(output_dir)
    if "init" in provenance:  # an older checkpoint: the model saved with it (at every checkpoint) tells its --init
        payload["settings"]["init"] = provenance["init"]
    return payload


def _saved_model_provenance(output_dir: PathLike) -> Dict[str, Any]:
    """The provenance of the model saved in ``output_dir`` ({} when there is none or it is unreadable)."""
    try:
        provenance = read_meta(output_dir).get("provenance")
    except (OSError, ValueError):
        return {}
    return provenance if isinstance(provenance, dict) else {}


#: The setting of a sentence run whose epochs are padded to a multiple of the processes' batches (True; every batch
#: trains every epoch: :class:`~.sentences.SentenceBatcher`). Recorded from the run's batcher: a checkpoint without
#: it dropped each epoch's last ``n_batches % world`` batches, and its resume goes on dropping them, exactly.
PADDED_EPOCHS = "padded_epochs"
#: Settings recorded only since a later version: an older checkpoint without them still resumes. (A sentence
#: run's ``length_pool`` is not one: trainer._length_pool fills in the pool such checkpoints' runs used.)
#: (Not ``tokenizer``: a checkpoint of a run from before --tokenizer existed read with none, which its absence says.)
ADDED_SETTINGS = ("data", "lang", "optimizer", "lr", "dropout", "clip", "init", "new_vocab", "init_vocab", PADDED_EPOCHS)
#: Command-line spelling of a setting in error messages.
_OPTION = {"batch_size": "--batch-size", "unroll": "--unroll", "seed": "--seed", "negatives": "--negatives",
           "lang": "--lang", "optimizer": "--optimizer", "lr": "--lr", "length_pool": "--length-pool",
           "dropout": "--dropout", "clip": "--clip"}
#: Settings that a run either has (a value) or not (None, False): a resume that adds or leaves one out is
#: refused naming it, by its ``(left out, added)`` message.
_GIVEN_OR_LEFT_OUT = {"init": (Errors.E_RESUME_INIT_MISSING, Errors.E_RESUME_INIT_ADDED),
                      "new_vocab": (Errors.E_RESUME_NEW_VOCAB_MISSING, Errors.E_RESUME_NEW_VOCAB_ADDED)}


def _describe(name: str, value: Any) -> str:
    if name == "sentences":
        return "streams (no --sentences)" if value is None else f"--sentences --max-length {value}"
    if name == "tokenizer":  # the [nlp.tokenizer] block --tokenizer gave (TrainConfig.tokenizer), filled in
        from .data import shown_block

        return Errors.E_RESUME_TOKENIZER_DEFAULT if value is None else Errors.E_RESUME_TOKENIZER_BLOCK.format(
            block=shown_block(value))
    return f"{_OPTION.get(name, name)} {value}"


def _init_has_softmax(init: str) -> Optional[bool]:
    """Whether model ``init`` has a softmax (read from its files' headers: no weights are loaded);
    None when it cannot be read (moved, deleted)."""
    from .modelio import has_softmax

    try:
        return has_softmax(init)
    except (OSError, ValueError):
        return None


def _started(init: str, new_vocab: bool) -> Tuple[str, str]:
    """``(how the run started, the options that resume it)`` for a run that fine-tunes ``init``; ``new_vocab``:
    its vocabulary was built from the corpus, by --new-vocab or because ``init`` has no softmax. The options are
    pasted into a command: ``init`` in them is shell-quoted (:func:`~spacy_elmo.paths.shell_quoted`)."""
    shell_init = shell_quoted(init)
    if not new_vocab:
        return Errors.E_RESUME_STARTED.format(shell_init=shell_init), f"--init {shell_init}"
    has_softmax = _init_has_softmax(init)
    if has_softmax is False:  # the vocabulary came from the corpus whatever the flag: --init alone resumes
        return Errors.E_RESUME_STARTED_NO_SOFTMAX.format(shell_init=shell_init), f"--init {shell_init}"
    if has_softmax:
        return Errors.E_RESUME_STARTED_NEW_VOCAB.format(shell_init=shell_init), f"--init {shell_init} --new-vocab"
    # right whether or not it has a softmax
    return (Errors.E_RESUME_STARTED_NEW_VOCAB_UNKNOWN.format(init=init, shell_init=shell_init),
            f"--init {shell_init} --new-vocab")


def _given_or_left_out(name: str, saved: Dict[str, Any], output_dir: PathLike, current: Dict[str, Any]) -> ValueError:
    """The refusal of a resume that adds setting ``name`` (of :data:`_GIVEN_OR_LEFT_OUT`) or leaves it out."""
    init = saved.get("init") or current.get("init")
    started, resume_with = _started(saved["init"], bool(saved.get("new_vocab"))) if saved.get("init") else ("", "")
    why = (Errors.E_RESUME_INIT_MISSING_RECORD if saved.get("new_vocab") else Errors.E_RESUME_INIT_MISSING_VOCAB).format(init=init)
    left_out, added = _GIVEN_OR_LEFT_OUT[name]
    message = left_out if saved.get(name) else added
    return ValueError(message.format(path=output_dir, init=init, shell_init=shell_quoted(init) if init else init, started=started,
                                     resume_with=resume_with, why=why))


def check_settings(saved: Dict[str, Any], current: Dict[str, Any], output_dir: PathLike) -> None:
    """Settings that change the batches, shapes or updates must match for an exact resume.

    The kept ``--init`` vocabulary first: a model replaced at that path changes the corpus's ids (``data``) and
    the vocabulary size too, and is then what to name. The vocabulary size last: other text (``data``) changes it
    too, and is then what to name, not --vocab-size and --min-count."""
    for name in sorted(current, key=lambda setting: (setting != "init_vocab", setting == "vocab_size")):
        expected = current[name]
        if name in ADDED_SETTINGS and name not in saved:
            continue
        found = saved.get(name)
        if found == expected:
            continue
        earlier, now = saved.get("init"), current.get("init")
        # What another --init changes (its vocabulary; one without a softmax builds it from the corpus, flag
        # or not, so new_vocab's record flips too): named as that model.
        if name in ("init_vocab", "new_vocab", "vocab_size", "data") and earlier is not None and now is not None and earlier != now:
            raise ValueError(Errors.E_RESUME_OTHER_INIT.format(path=output_dir, found=earlier, expected=now,
                                                               shell_found=shell_quoted(earlier),
                                                               shell_expected=shell_quoted(now)))
        if name == "init_vocab":
            if found is None or expected is None:  # the vocabulary kept on one side only: new_vocab names it
                continue
            sizes = saved.get("vocab_size"), current.get("vocab_size")
            if None not in sizes and sizes[0] != sizes[1]:
                difference = Errors.E_INIT_VOCAB_SIZES.format(found=sizes[0], expected=sizes[1])
            else:  # the same size (or unrecorded): "100000 words when the run started, 100000 now" said nothing
                difference = Errors.E_INIT_VOCAB_WORDS
            raise ValueError(Errors.E_RESUME_INIT_CHANGED.format(  # the same --init, another model
                path=output_dir, init=now, difference=difference))
        if name in _GIVEN_OR_LEFT_OUT:  # given on one side only: named; another spelling of the same --init resumes
            if found and expected:
                continue
            raise _given_or_left_out(name, saved, output_dir, current)
        if name == "data":
            raise ValueError(Errors.E_CHECKPOINT_DATA.format(path=output_dir, shell_path=shell_quoted(output_dir)))
        if name == "vocab_size":  # what --vocab-size and --min-count made of the corpus: both named
            raise ValueError(Errors.E_RESUME_VOCAB_SIZE.format(path=output_dir, shell_path=shell_quoted(output_dir), found=found,
                                                             expected=expected))
        if name == "world":  # no option: torchrun's sizes
            def processes(n: Any) -> str:  # an int, but a damaged checkpoint may hold anything
                return counted(n, "process", "processes") if isinstance(n, int) else repr(n)

            raise ValueError(Errors.E_RESUME_WORLD.format(
                path=output_dir, shell_path=shell_quoted(output_dir), found=processes(found), expected=processes(expected),
                how=Errors.E_RESUME_WORLD_HOW_ONE if found == 1 else Errors.E_RESUME_WORLD_HOW.format(found=found),
                rerun=Errors.E_RESUME_WORLD_RERUN_ONE if found == 1 else Errors.E_RESUME_WORLD_RERUN))
        if name == "model_config":
            raise ValueError(Errors.E_RESUME_MODEL.format(path=output_dir, found=found, expected=expected))
        raise ValueError(Errors.E_CHECKPOINT_MISMATCH.format(
            path=output_dir, shell_path=shell_quoted(output_dir), found=_describe(name, found),
            expected=_describe(name, expected)))
