"""This project's own model format: ``config.json`` + ``model.safetensors``.

``config.json``: ``{"format": "spacy-elmo/bilm", "version": 1, "config": {...BiLMConfig...},
"extra": [names of extra tensors], "provenance": {...}}``. The safetensors file
holds the biLM's state dict and any extra tensors (e.g. ``softmax.weight``,
``softmax.bias`` of a pretrained model). A fitted initial state
(:meth:`BiLM.fit_initial_state`) lives beside them in ``initial_state.safetensors``
(``initial_h``, ``initial_c``), written after the weights: computed from them
after training, it can be refitted without rewriting them. No pickle anywhere.
"""

import json
import os
import pickle
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .._typing import PathLike
from ..atomic import atomic_write, make_dirs, naming, sync, sync_dir
from ..errors import Errors, listed, with_article
from ..hdf5 import is_embeddings_file
from ..paths import (broken_link_error, files_listed, missing_path_error, name_shown, python_quoted, read_json_file,
                     refuse_empty_path, shell_quoted)
from .config import BiLMConfig, is_int

if TYPE_CHECKING:  # model.py imports this module when it saves or loads
    from .model import BiLM

FORMAT = "spacy-elmo/bilm"
VERSION = 1
CONFIG_NAME = "config.json"
OPTIONS_GLOB = "*options*.json"  # the options file of a directory of AllenNLP weights
# What makes a directory a model to the loader: written last and removed first when a directory is replaced.
MODEL_MARKERS = (CONFIG_NAME, OPTIONS_GLOB)
WEIGHTS_NAME = "model.safetensors"
INITIAL_STATE_NAME = "initial_state.safetensors"
INITIAL_STATE_KEYS = ("initial_h", "initial_c")
#: The temporary directory of a save in progress, inside the model directory.
SAVE_TMP_PREFIX = ".saving."
#: Where the bundled default model lives inside the package.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "data" / "default"


def resolve_model_dir(directory: PathLike) -> Path:
    """The string ``"default"`` -> the bundled model directory; anything else -> a Path.

    Only the string: ``Path("default")`` and ``"./default"`` are a directory named ``default``
    (this module passes Paths on, e.g. to :func:`write_initial_state`, which ``fit-state`` calls,
    which must write into that directory, never into the bundled model). The empty string: an error
    (:func:`refuse_empty_path`), not the current directory."""
    refuse_empty_path(directory, Errors.E_PATH_EMPTY_MODEL_DIR)
    if isinstance(directory, str) and directory == "default":
        if not (DEFAULT_MODEL_DIR / CONFIG_NAME).exists():
            raise FileNotFoundError(Errors.E_NO_DEFAULT_MODEL.format(path=DEFAULT_MODEL_DIR))
        return DEFAULT_MODEL_DIR
    return Path(directory)


def save_native(
    model: "BiLM",
    directory: PathLike,
    extra_tensors: Optional[Dict[str, torch.Tensor]] = None,
    dtype: Optional[torch.dtype] = None,
    provenance: Optional[Dict[str, Any]] = None,
    initial_state=None,
) -> None:
    """Write the model into ``directory``. A save killed while writing leaves the directory as it
    was; one killed while moving the files in leaves it without ``config.json`` (loading says the
    model is incomplete), never the new weights with the old config or without their initial state.
    initial_state, provenance: written instead of the model's own (None: the model's own)."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ValueError(Errors.E_SAVE_DTYPE.format(dtype=dtype))
    refuse_empty_path(directory, Errors.E_PATH_EMPTY_MODEL_DIR)  # Path(""): the current directory, written into
    directory = Path(directory)
    tensors = {name: p.detach() for name, p in model.state_dict().items()}
    for name in INITIAL_STATE_KEYS:  # stored on their own (initial_state.safetensors)
        tensors.pop(name, None)
    extra = dict(extra_tensors or {})
    for name, value in extra.items():
        if not isinstance(name, str) or name in tensors or name in INITIAL_STATE_KEYS:
            # it replaced the biLM's own tensor in the file: loaded silently as that weight when of its shape
            raise ValueError(Errors.E_SAVE_EXTRA_NAME.format(name=name))
        if not isinstance(value, torch.Tensor):
            raise TypeError(Errors.E_SAVE_EXTRA_TYPE.format(name=name, a_type=with_article(type(value).__name__)))
        tensors[name] = value.detach()
    tensors = {k: cast_for_save(k, v, dtype).cpu().contiguous() for k, v in tensors.items()}
    state = model.initial_state if initial_state is None else initial_state
    state_tensors = None if state is None else _initial_state_tensors(state)  # checked before anything is written
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "config": model.config.to_dict(),
        "extra": sorted(extra),
        "provenance": reading_provenance(model) if provenance is None else provenance,
    }
    # The files are written in a temporary directory inside ``directory`` (so a killed save
    # leaves nothing beside it; the next save removes what a kill left) and moved into place.
    make_dirs(directory)
    for stale in directory.glob(f"{SAVE_TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp: Optional[Path] = None
    try:
        tmp = Path(tempfile.mkdtemp(dir=directory, prefix=SAVE_TMP_PREFIX))
        write_safetensors(tensors, tmp / WEIGHTS_NAME)
        if state_tensors is not None:
            write_safetensors(state_tensors, tmp / INITIAL_STATE_NAME)
        with naming(tmp / CONFIG_NAME):
            (tmp / CONFIG_NAME).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        with naming(tmp):
            sync(tmp)  # on the disk before the renames publish it (a power loss: not an empty config.json)
        # config.json marks a complete model: the old one goes first and the new one comes last,
        # so a save killed in between leaves an incomplete model (a clear error on load), never
        # new weights beside the old config, nor without their initial state (zeros, silently).
        for name in (CONFIG_NAME, INITIAL_STATE_NAME):
            (directory / name).unlink(missing_ok=True)
        for name in (WEIGHTS_NAME, INITIAL_STATE_NAME, CONFIG_NAME):
            if (tmp / name).exists():
                os.replace(tmp / name, directory / name)
        sync_dir(directory)
    finally:
        if tmp is not None:
            _remove_tree(tmp)


def _remove_tree(path: Path) -> None:
    """``shutil.rmtree(path)``, finished even when a signal's exception interrupts it (pretrain's stop handler
    raises wherever the main thread is: a SIGTERM during a checkpoint's cleanup left the temporary directory);
    that exception is raised once the directory is gone."""
    pending: Optional[BaseException] = None
    while True:
        try:
            shutil.rmtree(path, ignore_errors=True)
            break
        except BaseException as err:  # KeyboardInterrupt, the command line's Terminated (SIGTERM)
            pending = err
    if pending is not None:
        raise pending


#: The dtypes E_SAVE_DTYPE_OVERFLOW suggests saving in instead of a narrower one, widest range first.
WIDE_SAVE_DTYPES = (torch.float32, torch.bfloat16)


def cast_for_save(name: str, value: torch.Tensor, dtype: Optional[torch.dtype], fix: Optional[str] = None,
                  not_finite: Optional[str] = None) -> torch.Tensor:
    """``value`` in ``dtype`` (floating tensors only; None: as it is), for every writer of weights (BiLM.save,
    the AllenNLP export, the softmax beside it, a saved pipeline's elmo layer). An error for a value that holds NaN
    or infinities (a diverged training's: it was written, and refused only when read back), ``not_finite`` (the
    writer's message, formatted with ``name`` and ``count``; default E_SAVE_NOT_FINITE; :func:`require_finite`),
    and for a cast that overflows to infinity, ending with ``fix`` (default: the dtypes that hold the values, or
    dtype=None where only the model's own does)."""
    if not value.is_floating_point():
        return value
    require_finite(value, name, "", not_finite or Errors.E_SAVE_NOT_FINITE)  # the writers' messages name no path
    if dtype is None:
        return value
    cast, max_abs = cast_finite(value, dtype)
    if max_abs is not None:
        if fix is None:
            wider = [str(d) for d in WIDE_SAVE_DTYPES if d != dtype and torch.finfo(d).max >= max_abs]
            fix = (Errors.E_SAVE_DTYPE_OVERFLOW_WIDER.format(dtypes=" or ".join(wider), model_dtype=value.dtype)
                   if wider else Errors.E_SAVE_DTYPE_OVERFLOW_KEEP.format(model_dtype=value.dtype))
        raise ValueError(Errors.E_SAVE_DTYPE_OVERFLOW.format(name=name, dtype=dtype, max_abs=max_abs, fix=fix))
    return cast


def cast_finite(value: torch.Tensor, dtype: torch.dtype) -> Tuple[torch.Tensor, Optional[float]]:
    """``value`` (finite: :func:`require_finite` checked it) in ``dtype``, and the largest magnitude of ``value``
    where the cast overflowed to infinity (None: it did not), for the writers' and the readers' errors."""
    cast = value.to(dtype)
    return cast, None if torch.isfinite(cast).all() else float(value.abs().max())


def require_finite(value: torch.Tensor, name: str, path: PathLike, message: Optional[str] = None) -> None:
    """A clear error (``message``, formatted with ``path``, ``name`` and ``count``; default E_WEIGHTS_NOT_FINITE)
    when the weight ``name`` read from ``path`` holds NaN or infinite values."""
    finite = torch.isfinite(value)
    if not finite.all():
        template = message or Errors.E_WEIGHTS_NOT_FINITE
        raise ValueError(template.format(path=path, name=name, count=int((~finite).sum())))


def check_weight(value: torch.Tensor, name: str, path: PathLike, not_float: str, dtype: Optional[torch.dtype] = None,
                 directory: PathLike = "", not_finite: Optional[str] = None) -> torch.Tensor:
    """``value``, a weight read as ``name`` from ``path`` (a file, or where a state_dict came from; ``name``: its
    tensor's or state_dict key), checked as every reader checks one: floating point, else ValueError ``not_float``
    (the reader's message: formatted with ``name``, ``path``, the ``dtype`` found and ``directory``, the model
    directory where it names one), an integer table copied into a float parameter loading silently; and finite
    (:func:`require_finite`, with the reader's message ``not_finite``), a NaN giving NaN vectors. ``dtype``: cast to
    it (the model's), a finite float64 value beyond its range being inf there: E_WEIGHT_DTYPE_OVERFLOW, not the
    message for a NaN in the file, which has none. Returns the value (cast)."""
    if not value.is_floating_point():
        raise ValueError(not_float.format(name=name, path=path, dtype=value.dtype, directory=directory))
    require_finite(value, name, path, not_finite)
    if dtype is not None:
        cast, max_abs = cast_finite(value, dtype)
        if max_abs is not None:
            raise ValueError(Errors.E_WEIGHT_DTYPE_OVERFLOW.format(path=path, name=name, max_abs=max_abs, dtype=dtype))
        value = cast
    return value


def model_path(directory: PathLike, offer_default: bool = True) -> Path:
    """The directory of a model to load (``"default"`` resolved); clear errors when it does not
    exist, is a file, or cannot be entered (PermissionError: it, or a directory above it, lacks the search
    permission this account needs). ``offer_default=False``: the error of a missing path does not suggest
    ``"default"`` (for a caller that refuses the bundled model)."""
    path = resolve_model_dir(directory)
    try:  # EACCES where path, or a directory above it, cannot be entered (the first file read raised it bare)
        os.stat(path / CONFIG_NAME)
    except PermissionError as err:
        raise PermissionError(Errors.E_MODEL_DIR_NOT_ENTERABLE.format(path=path, error=err.strerror or err)) from None
    except OSError:
        pass  # no config.json (AllenNLP files), no such path, a file: said below
    if not path.exists():
        or_default = Errors.E_MODEL_PATH_OR_DEFAULT if offer_default else ""
        if offer_default and not isinstance(directory, str) and os.fspath(directory) == "default":
            or_default = Errors.E_MODEL_PATH_OR_DEFAULT_STR  # Path("default"): only the string names the bundled model
        raise missing_path_error(path, Errors.E_MODEL_PATH_MISSING.format(path=path, or_default=or_default),
                                 what=Errors.E_LINK_TO_MODEL_DIR)
    if not path.is_dir():  # an embeddings file (embed's OUTPUT, say) is named as what it is: no weights in it
        if is_embeddings_file(path):
            raise NotAModelDir(Errors.E_MODEL_PATH_IS_EMBEDDINGS.format(path=path))
        raise ModelPathIsFile(Errors.E_MODEL_PATH_IS_FILE.format(path=path, fix=Errors.E_MODEL_PATH_FIX_LOAD), path)
    return path


def allennlp_files_of(path: Path):
    """``(options.json, weights.hdf5)`` when the model directory ``path`` holds AllenNLP weights, None
    when it is a native model directory; an error when it holds both (which one is meant is unknown)."""
    if not os.path.lexists(path / CONFIG_NAME):  # a dangling config.json: native, its read names the link
        try:
            found = find_allennlp_files(path)
        except ValueError:  # bilm-tf's save_dir holds its options.json beside the checkpoint, no .hdf5
            refuse_tf_checkpoint(path)
            raise
        if found is None:
            refuse_tf_checkpoint(path)
        return found
    try:
        found = find_allennlp_files(path)
    except ValueError:  # not one complete pair (e.g. an embeddings .hdf5 beside the model): native
        return None
    if found is not None:
        raise ValueError(
            Errors.E_MODEL_DIR_AMBIGUOUS.format(path=path, config=CONFIG_NAME, options=found[0].name, weights=found[1].name)
        )
    return None


class SavedPipelineGiven(FileNotFoundError):
    """A saved spaCy pipeline, or one of its component directories, given where biLM weights are read
    (:func:`read_meta`, so ``BiLM.load`` and every model loader): ``path`` as read, ``pipeline`` its pipeline.
    The one check of that; callers that know the situation better (a component's weights setting,
    ``spacy-elmo evaluate``) say it in their own words, and ``spacy-elmo export`` writes the pipeline's biLM."""

    def __init__(self, path: Path, pipeline: Path) -> None:
        self.path, self.pipeline = path, pipeline
        super().__init__(Errors.E_MODEL_IS_PIPELINE.format(given=self.given, py_pipeline=python_quoted(pipeline),
                                                            shell_pipeline=shell_quoted(pipeline)))

    @property
    def component(self) -> Optional[str]:
        """The component whose directory ``path`` is; None when it is the pipeline itself."""
        return None if self.path == self.pipeline else self.path.name

    @property
    def given(self) -> str:
        """What ``path`` is, for the ``{given}`` of a message: the pipeline, or its component's directory
        (one wording for both read "model-last is (in) the saved spaCy pipeline model-last")."""
        if self.component is None:
            return Errors.E_GIVEN_PIPELINE.format(path=self.path)
        return Errors.E_GIVEN_PIPELINE_COMPONENT.format(path=self.path, component=self.component, pipeline=self.pipeline)


def saved_pipeline_of(path: Path) -> Optional[Path]:
    """The saved spaCy pipeline that ``path`` is, or whose component directory it is; else None.
    (A pipeline has config.cfg and meta.json; a native model config.json.)"""
    if (path / CONFIG_NAME).is_file():
        return None
    for pipeline, is_component in ((path, False), (path.parent, True)):
        if (pipeline / "meta.json").is_file() and (pipeline / "config.cfg").is_file():
            if not is_component or (path / "cfg").is_file():
                return pipeline
    return None


def read_meta(directory: PathLike) -> Dict[str, Any]:
    directory = resolve_model_dir(directory)
    path = directory / CONFIG_NAME
    if not path.exists():
        if path.is_symlink():  # dangling (an annex file not fetched), a loop: "no config.json" named no link
            raise broken_link_error(path)
        pipeline = saved_pipeline_of(directory)
        if pipeline is not None:
            raise SavedPipelineGiven(directory, pipeline)
        raise NativeDirMissing.of(directory, CONFIG_NAME)
    return read_config_json(path)


def is_native_config(path: Path) -> bool:
    """Whether the file ``path`` is a spacy-elmo model's config.json (a JSON object whose "format" is
    :data:`FORMAT`); False for any other file, a missing or unreadable one included."""
    try:
        meta = read_json_file(path, "{error}")
    except (OSError, ValueError):  # none, unreadable, a directory, not JSON, not UTF-8 or nested too deep
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def read_config_json(path: Path) -> Dict[str, Any]:
    """The checked contents of a native model's ``config.json`` at ``path`` (named so or copied under another
    name: ``pretrain --options`` reads one for the model's sizes)."""
    try:  # no JSON, no UTF-8, nested past the recursion limit, no object: ValueErrors naming the file and the fix
        meta = read_json_file(path, Errors.E_NATIVE_CONFIG_NOT_JSON, Errors.E_NATIVE_CONFIG_NOT_OBJECT)
    except OSError as err:  # e.g. a directory named config.json
        raise unreadable_file(path, err) from err
    if meta.get("format") != FORMAT:
        if "format" in meta:
            shown = json.dumps(meta["format"], ensure_ascii=False)  # as the file spells it: "bert", null, 3
            found = Errors.E_NATIVE_FORMAT_OTHER.format(found=shown if len(shown) <= 60 else shown[:57] + "...")
        else:
            found = Errors.E_NATIVE_FORMAT_ABSENT
        raise NotAModelDir(Errors.E_NATIVE_BAD_FORMAT.format(path=path, found=found, expected=FORMAT))
    version: Any = meta.get("version")  # a JSON value: is_int() checks it
    if not (is_int(version) and 1 <= version <= VERSION):
        raise ValueError(Errors.E_NATIVE_VERSION.format(path=path, found=version, supported=VERSION))
    if not isinstance(meta.get("config"), dict):
        raise ValueError(Errors.E_NATIVE_CONFIG_NO_CONFIG.format(path=path, found=meta.get("config")))
    extra = meta.get("extra", [])
    if not (isinstance(extra, list) and all(isinstance(name, str) for name in extra)):
        raise ValueError(Errors.E_NATIVE_EXTRA_NOT_LIST.format(path=path, found=extra))
    return meta


def write_safetensors(tensors: Dict[str, torch.Tensor], path: PathLike) -> None:
    """Save ``tensors`` to ``path``, readable as any file the user creates (the umask's mode;
    safetensors alone writes 0600, so other accounts could not load a shared model). A failed write (a
    read-only directory, a full disk) is an OSError, as of any other file: safetensors raises its own error."""
    try:
        save_file(tensors, str(path))
    except SafetensorError as err:
        # Its I/O errors say "(os error 28)": kept as the errno (a full disk is ENOSPC, as of any other file).
        code = re.search(r"\(os error (\d+)\)", str(err))
        message = Errors.E_SAFETENSORS_WRITE.format(path=path, error=err)
        raise (OSError(int(code.group(1)), message, str(path)) if code else OSError(message)) from err
    os.chmod(path, 0o666 & ~_umask())


#: What a model's provenance says of how it reads text (what ``evaluate`` defaults to and the ``elmo``
#: component checks a pipeline against): kept when a loaded model is saved without ``provenance=``.
READING_PROVENANCE = ("trained_by", "lang", "tokenizer", "reading")


def reading_provenance(model: torch.nn.Module) -> Dict[str, Any]:
    """The reading keys of ``model.provenance`` (loading set it): a loaded model saved again keeps the language,
    tokenizer and reading it was trained with, and not the facts of a training (steps, held-out scores)
    that its weights, changed since, may no longer match. A saved spaCy pipeline keeps them with its biLM."""
    own = getattr(model, "provenance", None) or {}
    return {k: own[k] for k in READING_PROVENANCE if k in own}


def _umask() -> int:
    """The process's umask; read from /proc where it can be (os.umask sets it while reading,
    for the whole process: another thread's file could get mode 0666 in between)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def unreadable_file(path: PathLike, err: OSError) -> ValueError:
    """The error for a model file at ``path`` that exists but could not be opened (``err``): a directory where
    the file belongs is named so (with the file expected there), anything else (no read permission) unreadable."""
    if Path(path).is_dir():  # IsADirectoryError on POSIX, PermissionError on Windows
        return ValueError(Errors.E_MODEL_FILE_IS_DIR.format(path=path, name=Path(path).name))
    return ValueError(Errors.E_MODEL_FILE_UNREADABLE.format(path=path, error=err))


def torch_load_error(err: Exception) -> str:
    """What ``torch.load(weights_only=True)`` said of a file it could not read, for an error: its own
    sentence, but not the advice to retry with ``weights_only=False`` (arbitrary code run from the file)
    that its UnpicklingError leads with, nor its request to file an issue with PyTorch: the file is damaged or
    not a torch file, which is no bug of torch's. Used by every ``torch.load`` of a user's file: a state_dict
    (:mod:`~spacy_elmo.allennlp_compat`) and a pretrain checkpoint (:mod:`~spacy_elmo.training.checkpoint`)."""
    text = str(err)
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(r"WeightsUnpickler error:\s*(.*?)\s*(?:\n\n|$)", text, re.S)
        text = found.group(1) if found else ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def check_readable(path: PathLike) -> None:
    """A clear error for a model file that exists but cannot be opened (no read permission, a directory):
    the readers' own errors read as a damaged file, whose fix (copy the model again) is not this one's."""
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise unreadable_file(path, err) from err


@contextmanager
def _safetensors_errors(path: Path) -> Iterator[None]:
    """A damaged or unreadable safetensors file ``path`` read inside: a clear error naming it."""
    check_readable(path)
    try:
        yield
    except (SafetensorError, OSError) as err:
        raise ValueError(Errors.E_SAFETENSORS_DAMAGED.format(path=path, error=err)) from err


def read_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    """Every tensor of the safetensors file ``path``; a damaged or unreadable file is a clear error naming it."""
    with _safetensors_errors(path):
        return load_file(str(path))


def safetensors_shapes(path: Path) -> Dict[str, List[int]]:
    """The shape of every tensor of the safetensors file ``path``, by name, read from its header: no tensor is loaded."""
    with _safetensors_errors(path):
        with safe_open(str(path), framework="pt") as f:
            return {name: list(f.get_slice(name).get_shape()) for name in f.keys()}


def safetensors_names(path: Path) -> List[str]:
    """The tensor names of the safetensors file ``path``, read from its header: no tensor is loaded."""
    return list(safetensors_shapes(path))


def load_tensors(directory: PathLike) -> Dict[str, torch.Tensor]:
    """Every tensor of a native model directory (biLM and extras), as stored."""
    directory = resolve_model_dir(directory)
    path = directory / WEIGHTS_NAME
    if not path.exists():
        if path.is_symlink():  # dangling, a loop: the link named, not "no model.safetensors"
            raise broken_link_error(path)
        raise NativeDirMissing.of(directory, WEIGHTS_NAME)
    return read_safetensors(path)


def load_state_into(
    model: torch.nn.Module, tensors: Dict[str, torch.Tensor], source: PathLike, extra: Iterable[str] = ()
) -> None:
    """Copy ``tensors`` into ``model`` with shape, dtype and finiteness checks. The tensors named in
    ``extra`` (config.json's list, e.g. a softmax) are skipped; any other tensor the model lacks is an error."""
    with torch.no_grad():
        for name, param in model.state_dict().items():
            if name not in tensors:
                raise ValueError(Errors.E_NATIVE_TENSOR_MISSING.format(path=source, name=name, expected=tuple(param.shape)))
            value = tensors[name]
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(
                    Errors.E_NATIVE_TENSOR_SHAPE.format(
                        name=name, path=source, found=tuple(value.shape), expected=tuple(param.shape)
                    )
                )
            param.copy_(check_weight(value, name, source, Errors.E_NATIVE_TENSOR_DTYPE, dtype=param.dtype))
    absent = sorted(set(extra) - set(tensors))
    if absent:
        raise ValueError(Errors.E_NATIVE_EXTRA_MISSING.format(path=source, names=", ".join(absent)))
    unexpected = sorted(set(tensors) - set(model.state_dict()) - set(extra))
    if unexpected:
        raise ValueError(Errors.E_NATIVE_TENSOR_UNEXPECTED.format(path=source, names=", ".join(unexpected)))


class NotAModelDir(ValueError):
    """A directory given as a model that holds no model spacy-elmo reads (a foreign config.json, a TensorFlow
    checkpoint, AllenNLP files that are not one pair), or a file given as one: the spaCy component says it naming
    the setting that gave it, as it does a path that names nothing."""


class ModelPathIsFile(NotAModelDir):
    """:func:`model_path`'s error for a file given as a model directory. Its fix names BiLM's loaders: a caller whose
    user gave the file another way (``pretrain --init``, the CLI's MODEL_DIR and --model, the spaCy component's weights,
    ``Elmo(file, None, ...)``) raises :meth:`advising` its own."""

    def __init__(self, message: str, path: Optional[Path] = None) -> None:
        super().__init__(message)
        self.path = path  # None once unpickled (args hold the message alone)

    def advising(self, fix: str) -> NotAModelDir:
        """This error with ``fix`` (an ``Errors.E_MODEL_PATH_FIX_*``) as its advice."""
        if self.path is None:
            return self
        return ModelPathIsFile(Errors.E_MODEL_PATH_IS_FILE.format(path=self.path, fix=fix), self.path)


class NativeDirMissing(FileNotFoundError):
    """A directory given as a model that lacks a spacy-elmo model's config.json (or its model.safetensors):
    :data:`Errors.E_NATIVE_DIR_MISSING`. Its fix names BiLM's Python API; a command line, which cannot call it,
    raises :meth:`advising` its own (``cli.app.model_argument``, ``pretrain --init``)."""

    #: The directory given and the file it lacks (set by :meth:`of`: OSError reads more constructor arguments as
    #: errno, strerror and filename)
    model_dir: Optional[Path] = None
    missing_name: str = CONFIG_NAME

    @classmethod
    def of(cls, path: PathLike, filename: str, fix: str = Errors.E_NATIVE_DIR_FIX_LOAD) -> "NativeDirMissing":
        err = cls(Errors.E_NATIVE_DIR_MISSING.format(path=path, filename=filename, fix=fix))
        err.model_dir, err.missing_name = Path(path), filename
        return err

    def advising_cli(self) -> "NativeDirMissing":
        """This error with :data:`Errors.E_NATIVE_DIR_FIX_CLI` as its advice: what a model directory is, which
        commands write one, and what the directory given holds (its first names, or that it is empty)."""
        path = self.model_dir
        if path is None:
            return self
        fix = Errors.E_NATIVE_DIR_FIX_CLI
        shown = 4
        try:
            entries = sorted(path.iterdir(), key=lambda entry: entry.name)
            # a directory marked "/": one named like a model's file (options.json/) reads as that file otherwise;
            # the names shown alone are looked at (a corpus directory given as a model holds thousands)
            names = [name_shown(entry.name) + ("/" if entry.is_dir() else "") for entry in entries[:shown]]
        except OSError:  # unreadable: the advice without the listing
            return NativeDirMissing.of(path, self.missing_name, fix)
        if names:
            fix += " " + Errors.E_NATIVE_DIR_HOLDS.format(path=path, names=listed(names, shown, len(entries)))
        else:
            fix += " " + Errors.E_NATIVE_DIR_EMPTY.format(path=path)
        return NativeDirMissing.of(path, self.missing_name, fix)


#: The files of a TensorFlow checkpoint (bilm-tf's ``save_dir``): the ``checkpoint`` index and each save's
#: ``.index``, ``.data-*`` (and ``.meta``) files.
TF_CHECKPOINT_GLOBS = ("checkpoint", "*.index", "*.data-*", "*.meta")


def refuse_tf_checkpoint(path: Path) -> None:
    """:class:`NotAModelDir` (:data:`Errors.E_TF_CHECKPOINT_DIR`) when the directory ``path`` holds a TensorFlow
    checkpoint: its ``checkpoint`` file and a save's ``.index`` or ``.data-*`` file."""
    found = sorted({f.name for pattern in TF_CHECKPOINT_GLOBS for f in path.glob(pattern) if f.is_file()})
    if "checkpoint" in found and any(name.endswith(".index") or ".data-" in name for name in found):
        shown = listed([name_shown(name) for name in found], 4)
        raise NotAModelDir(Errors.E_TF_CHECKPOINT_DIR.format(path=path, files=shown, shell_path=shell_quoted(path)))


def dirs_named_like(directory: Path, *patterns: str) -> str:
    """The ``dirs`` of E_ALLENNLP_DIR and E_OPTIONS_DIR: the directories in ``directory`` whose names match
    ``patterns`` (``options.json/``), not counted as the files they are named like; "" where there is none."""
    dirs = sorted({p for pattern in patterns for p in directory.glob(pattern) if p.is_dir()})
    if not dirs:
        return ""
    said = Errors.E_NAMED_LIKE_FILE_DIR if len(dirs) == 1 else Errors.E_NAMED_LIKE_FILE_DIRS
    return said.format(names=listed([name_shown(p.name) + "/" for p in dirs], 4))


def find_allennlp_files(directory: Path):
    """``(options.json, weights.hdf5)`` of a directory of AllenNLP weights, or None."""
    # no directory named like one (old_options.json/) is a candidate, as pretrain --options reads them; a dangling
    # link is (an annex file not fetched): its read names the missing file, not "0 .hdf5 file(s)"
    hdf5 = [p for p in sorted(directory.glob("*.hdf5")) + sorted(directory.glob("*.h5")) if not p.is_dir()]
    options = [p for p in sorted(directory.glob(OPTIONS_GLOB)) if not p.is_dir()]
    if not hdf5 and not options:
        return None
    if len(hdf5) != 1 or len(options) != 1:
        raise NotAModelDir(Errors.E_ALLENNLP_DIR.format(path=directory, n_hdf5=len(hdf5), n_options=len(options),
                                                         found=files_listed(hdf5 + options),
                                                         dirs=dirs_named_like(directory, "*.hdf5", "*.h5", OPTIONS_GLOB)))
    return options[0], hdf5[0]


def load_model(cls, directory: PathLike, stateful: bool = False, backend: str = "auto"):
    """Load a native directory, an AllenNLP weights directory, or ``"default"``."""
    path = model_path(directory)
    found = allennlp_files_of(path)
    if found is not None:
        return cls.from_allennlp(found[0], found[1], stateful=stateful, backend=backend)
    return model_from_native(cls, path, read_meta(path), load_tensors(path), stateful=stateful, backend=backend)


def model_from_native(
    cls, path: Path, meta: Dict[str, Any], tensors: Dict[str, torch.Tensor], stateful: bool = False, backend: str = "auto"
):
    """The model of the native directory ``path`` from its already read ``meta`` (:func:`read_meta`)
    and ``tensors`` (:func:`load_tensors`), for callers that also need the extra tensors."""
    missing = sorted({f.name for f in fields(BiLMConfig)} - set(meta["config"]))
    if missing:
        raise ValueError(Errors.E_NATIVE_CONFIG_FIELDS_MISSING.format(path=path / CONFIG_NAME, names=", ".join(missing)))
    try:
        config = BiLMConfig.from_dict(meta["config"])
    except ValueError as err:
        raise ValueError(Errors.E_NATIVE_BAD_CONFIG.format(path=path / CONFIG_NAME, error=err)) from err
    model = cls(config, stateful=stateful, backend=backend)
    load_state_into(model, tensors, path / WEIGHTS_NAME, extra=meta.get("extra") or ())
    model.set_initial_state(read_initial_state(path, config))
    provenance = meta.get("provenance")
    model.provenance = dict(provenance) if isinstance(provenance, dict) else {}
    return model


def read_initial_state(directory: PathLike, config: BiLMConfig):
    """``(h (2, L, P), c (2, L, C))`` from ``initial_state.safetensors`` of a native model directory whose
    model has ``config``, or None; errors naming the file for one that does not fit ``config`` (copied from
    another model), is not floating point or not finite."""
    path = resolve_model_dir(directory) / INITIAL_STATE_NAME
    if not path.exists():
        return None
    tensors = read_safetensors(path)
    L, P, C = config.n_layers, config.projection_dim, config.cell_dim
    expected = {"initial_h": (2, L, P), "initial_c": (2, L, C)}
    missing = [k for k in INITIAL_STATE_KEYS if k not in tensors]
    if missing:
        raise ValueError(Errors.E_NATIVE_TENSOR_MISSING.format(path=path, name=missing[0], expected=expected[missing[0]]))
    h, c = tensors["initial_h"], tensors["initial_c"]
    if tuple(h.shape) != expected["initial_h"] or tuple(c.shape) != expected["initial_c"]:
        raise ValueError(Errors.E_INITIAL_STATE_FILE_SHAPE.format(
            path=path, found_h=tuple(h.shape), found_c=tuple(c.shape), expected_h=expected["initial_h"],
            expected_c=expected["initial_c"], directory=path.parent))
    for name in INITIAL_STATE_KEYS:
        check_weight(tensors[name], name, path, Errors.E_INITIAL_STATE_FILE_DTYPE, directory=path.parent)
    return h, c


def write_initial_state(state, directory: PathLike) -> None:
    """Write ``state = (h, c)`` as the initial state of a native model directory
    (atomically), or with None remove it (sentences start from zeros)."""
    directory = resolve_model_dir(directory)
    if not (directory / CONFIG_NAME).exists():
        raise NativeDirMissing.of(directory, CONFIG_NAME)
    if state is None:
        (directory / INITIAL_STATE_NAME).unlink(missing_ok=True)
        return
    tensors = _initial_state_tensors(state)
    atomic_write(directory / INITIAL_STATE_NAME, lambda tmp: write_safetensors(tensors, tmp))


def _initial_state_tensors(state) -> Dict[str, torch.Tensor]:
    """The tensors of ``initial_state.safetensors`` for ``state = (h, c)``."""
    return {k: cast_for_save(k, v.detach(), torch.float32).cpu().contiguous() for k, v in zip(INITIAL_STATE_KEYS, state)}
