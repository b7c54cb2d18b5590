"""Reading and writing AllenNLP/bilm-tf ELMo weight files (hdf5, TF layout).

Dataset names and shapes (elmo-spec §6); D char dim, F filters, P projection,
C cells, I = P (every LSTM layer input has the projection width):

    char_embed                                   (261, D)
    CNN/W_cnn_{i}, CNN/b_cnn_{i}                 (1, width_i, D, count_i), (count_i,)
    CNN_high_{k}/W_carry, W_transform            (F, F)
    CNN_high_{k}/b_carry, b_transform            (F,)
    CNN_proj/W_proj, CNN_proj/b_proj             (F, P), (P,)        only when F != P
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/   d 0 forward, 1 backward
        W_0 (I + P, 4C), B (4C,), W_P_0 (C, P)   (no MultiRNNCell/Cell{l} level when n_layers == 1)
"""

import json
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, Tuple, Union

import h5py
import numpy as np
import torch

from ..atomic import atomic_write
from ..chars import N_CHAR_IDS
from ..errors import Errors, Warnings
from .config import BiLMConfig
from .native_io import require_finite

PathLike = Union[str, Path]


def lstm_prefix(direction: int, layer: int, n_layers: int) -> str:
    if n_layers == 1:
        return f"RNN_{direction}/RNN/LSTMCell"
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def expected_datasets(config: BiLMConfig) -> Iterator[Tuple[str, Tuple[int, ...]]]:
    """Every dataset of a weight file for ``config``, with its shape, in file order."""
    D, F, P, C = config.char_embedding_dim, config.n_filters, config.projection_dim, config.cell_dim
    yield "char_embed", (N_CHAR_IDS, D)
    for i, (width, count) in enumerate(config.filters):
        yield f"CNN/W_cnn_{i}", (1, width, D, count)
        yield f"CNN/b_cnn_{i}", (count,)
    for k in range(config.n_highway):
        yield f"CNN_high_{k}/W_carry", (F, F)
        yield f"CNN_high_{k}/b_carry", (F,)
        yield f"CNN_high_{k}/W_transform", (F, F)
        yield f"CNN_high_{k}/b_transform", (F,)
    if F != P:
        yield "CNN_proj/W_proj", (F, P)
        yield "CNN_proj/b_proj", (P,)
    for d in range(2):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer, config.n_layers)
            yield f"{prefix}/W_0", (P + P, 4 * C)
            yield f"{prefix}/B", (4 * C,)
            yield f"{prefix}/W_P_0", (C, P)


def dataset_names(handle: h5py.File) -> List[str]:
    """The names of every dataset in an open hdf5 file (groups left out)."""
    names: List[str] = []
    handle.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def read_datasets(config: BiLMConfig, weight_file: PathLike) -> Dict[str, np.ndarray]:
    """All datasets for ``config`` as float32 arrays, shape-checked with clear errors;
    a dataset that ``config`` does not describe is an error too."""
    path = Path(weight_file)
    if not path.exists():
        raise FileNotFoundError(Errors.E_WEIGHT_FILE_MISSING.format(path=path))
    if path.is_dir():
        raise ValueError(Errors.E_WEIGHT_FILE_IS_DIR.format(path=path))
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise ValueError(Errors.E_WEIGHT_FILE_NOT_HDF5.format(path=path, error=err)) from err
    arrays = {}
    # h5py reports damaged metadata as OSError, KeyError or RuntimeError from whichever access meets it.
    try:
        with handle:
            for name, shape in expected_datasets(config):
                if name not in handle or not isinstance(handle[name], h5py.Dataset):
                    raise ValueError(Errors.E_DATASET_MISSING.format(path=path, dataset=name, expected=shape))
                data = handle[name]
                if tuple(data.shape) != shape:
                    raise ValueError(
                        Errors.E_DATASET_SHAPE.format(dataset=name, path=path, found=tuple(data.shape), expected=shape)
                    )
                if data.dtype.kind != "f":
                    raise ValueError(Errors.E_DATASET_DTYPE.format(dataset=name, path=path, dtype=data.dtype.name))
                arrays[name] = np.asarray(data[...], dtype=np.float32)
                require_finite(torch.from_numpy(arrays[name]), name, path)
            unexpected = sorted(set(dataset_names(handle)) - set(arrays))
    except (OSError, KeyError, RuntimeError) as err:
        raise ValueError(Errors.E_WEIGHT_FILE_DAMAGED.format(path=path, error=err)) from err
    if unexpected:
        raise ValueError(Errors.E_DATASET_UNEXPECTED.format(path=path, datasets=", ".join(unexpected)))
    return arrays


def tensors_from_datasets(config: BiLMConfig, arrays: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """Convert TF-layout datasets to this project's state-dict names and layouts."""
    P = config.projection_dim
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    out = {"token_encoder.char_embedding": t(arrays["char_embed"])}
    for i in range(len(config.filters)):
        # (1, width, D, count) -> (count, D, width): nn.Conv1d layout.
        out[f"token_encoder.conv_weights.{i}"] = t(arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0))
        out[f"token_encoder.conv_biases.{i}"] = t(arrays[f"CNN/b_cnn_{i}"])
    for k in range(config.n_highway):
        g = f"CNN_high_{k}"
        out[f"token_encoder.highway_weights.{k}"] = t(
            np.concatenate([arrays[f"{g}/W_transform"].T, arrays[f"{g}/W_carry"].T], 0)
        )
        out[f"token_encoder.highway_biases.{k}"] = t(np.concatenate([arrays[f"{g}/b_transform"], arrays[f"{g}/b_carry"]]))
    if config.n_filters != P:
        out["token_encoder.projection.weight"] = t(arrays["CNN_proj/W_proj"].T)
        out["token_encoder.projection.bias"] = t(arrays["CNN_proj/b_proj"])
    for d, direction in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer, config.n_layers)
            w0 = arrays[f"{prefix}/W_0"]
            key = f"lstm.{direction}.{layer}"
            out[f"{key}.w_input"] = t(w0[:P])
            out[f"{key}.w_recurrent"] = t(w0[P:])
            out[f"{key}.bias"] = t(arrays[f"{prefix}/B"])
            out[f"{key}.w_proj"] = t(arrays[f"{prefix}/W_P_0"])
    return out


def datasets_from_state(config: BiLMConfig, state: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """Inverse of :func:`tensors_from_datasets`: TF-layout float32 arrays."""
    P = config.projection_dim
    a = lambda name: state[name].detach().cpu().float().numpy()  # noqa: E731
    out = {"char_embed": a("token_encoder.char_embedding")}
    for i in range(len(config.filters)):
        out[f"CNN/W_cnn_{i}"] = a(f"token_encoder.conv_weights.{i}").transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = a(f"token_encoder.conv_biases.{i}")
    F = config.n_filters
    for k in range(config.n_highway):
        w = a(f"token_encoder.highway_weights.{k}")
        b = a(f"token_encoder.highway_biases.{k}")
        out[f"CNN_high_{k}/W_carry"] = w[F:].T
        out[f"CNN_high_{k}/b_carry"] = b[F:]
        out[f"CNN_high_{k}/W_transform"] = w[:F].T
        out[f"CNN_high_{k}/b_transform"] = b[:F]
    if F != P:
        out["CNN_proj/W_proj"] = a("token_encoder.projection.weight").T
        out["CNN_proj/b_proj"] = a("token_encoder.projection.bias")
    for d, direction in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            prefix = lstm_prefix(d, layer, config.n_layers)
            key = f"lstm.{direction}.{layer}"
            out[f"{prefix}/W_0"] = np.concatenate([a(f"{key}.w_input"), a(f"{key}.w_recurrent")], 0)
            out[f"{prefix}/B"] = a(f"{key}.bias")
            out[f"{prefix}/W_P_0"] = a(f"{key}.w_proj")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def read_allennlp(model: torch.nn.Module, weight_file: PathLike) -> None:
    """Load an hdf5 weight file into ``model`` (a :class:`~spacy_elmo.BiLM`) in place."""
    tensors = tensors_from_datasets(model.config, read_datasets(model.config, weight_file))
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in tensors.items():
            params[name].copy_(value)


def write_allennlp(model: torch.nn.Module, options_file: PathLike, weight_file: PathLike) -> None:
    """Write ``options.json`` and the hdf5 weight file of ``model`` in the released layout."""
    config = model.config
    if getattr(model, "initial_state", None) is not None:
        warnings.warn(Warnings.W_INITIAL_STATE_NOT_EXPORTED.format(path=weight_file), UserWarning, stacklevel=3)
    arrays = datasets_from_state(config, dict(model.named_parameters()))

    def write_h5(tmp: Path) -> None:
        with h5py.File(tmp, "w") as fout:
            for name, _ in expected_datasets(config):
                fout.create_dataset(name, data=arrays[name])

    def write_json(tmp: Path) -> None:
        tmp.write_text(json.dumps(config.to_allennlp_options(), indent=2), encoding="utf-8")

    atomic_write(weight_file, write_h5)
    atomic_write(options_file, write_json)
