"""An independent NumPy float64 implementation of ELMo, straight from elmo-spec.md.

It reads the hdf5 datasets in their TF layout itself (no code shared with the
package), spells characters itself, and runs one sentence at a time with
explicit loops, so it checks the package's loader conversions, batching,
masking, marker handling and reversal as well as the arithmetic.

``convention="allennlp"`` computes the highway and LSTM the way AllenNLP's
loader transforms the same file (negated carry gate, gates reordered to
i, f, j, o, forget bias folded into the bias): if the package's exported file
gives the same numbers both ways, AllenNLP reads it as this project does.
``convention="bilm-tf"`` is ``"tf"`` with the graph bilm-tf's model.py builds for the options: LSTM cells
without a projection unless projection_dim < dim (no W_P_0, no proj_clip; a W_0 of another shape when
projection_dim > dim is its loader's ValueError), and n_filters < projection_dim its AssertionError.
"""

import json
from typing import Dict, List, Optional, Sequence, Tuple

import h5py
import numpy as np

BOS, EOS, BOW, EOW, PAD = 256, 257, 258, 259, 260


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def spell(token: str, max_chars: int = 50) -> np.ndarray:
    """Unshifted ids of a token: [bow, bytes[:max_chars-2], eow, pad...]; "<S>"/"</S>" are markers."""
    if token in ("<S>", "</S>"):
        return spell_marker(BOS if token == "<S>" else EOS, max_chars)
    data = list(token.encode("utf-8", errors="ignore"))[: max_chars - 2]
    ids = [BOW] + data + [EOW] + [PAD] * (max_chars - 2 - min(len(data), max_chars - 2))
    return np.array(ids[:max_chars])


def spell_marker(marker: int, max_chars: int = 50) -> np.ndarray:
    return np.array([BOW, marker, EOW] + [PAD] * (max_chars - 3))


def write_weights(path, options: dict, rng: np.random.Generator, lstm_scale: float = 1.0, overrides=None) -> None:
    """Random weights in the exact released hdf5 layout for ``options``."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    D = cnn["embedding"]["dim"]
    filters = cnn["filters"]
    F = sum(n for _, n in filters)
    P, C, L = lstm["projection_dim"], lstm["dim"], lstm["n_layers"]
    data = {"char_embed": rng.uniform(-1, 1, (261, D))}
    for i, (w, n) in enumerate(filters):
        data[f"CNN/W_cnn_{i}"] = rng.uniform(-0.3, 0.3, (1, w, D, n))
        data[f"CNN/b_cnn_{i}"] = rng.uniform(-0.1, 0.1, (n,))
    for k in range(cnn.get("n_highway") or 0):
        data[f"CNN_high_{k}/W_carry"] = rng.normal(0, 1 / np.sqrt(F), (F, F))
        data[f"CNN_high_{k}/b_carry"] = rng.normal(-1.0, 0.5, (F,))
        data[f"CNN_high_{k}/W_transform"] = rng.normal(0, 1 / np.sqrt(F), (F, F))
        data[f"CNN_high_{k}/b_transform"] = rng.normal(0, 0.1, (F,))
    if F != P:
        data["CNN_proj/W_proj"] = rng.normal(0, 1 / np.sqrt(F), (F, P))
        data["CNN_proj/b_proj"] = rng.normal(0, 0.1, (P,))
    for d in range(2):
        for layer in range(L):
            prefix = f"RNN_{d}/RNN/LSTMCell" if L == 1 else f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            data[f"{prefix}/W_0"] = lstm_scale * rng.normal(0, 1 / np.sqrt(2 * P), (2 * P, 4 * C))
            data[f"{prefix}/B"] = rng.normal(0, 0.1, (4 * C,))
            data[f"{prefix}/W_P_0"] = lstm_scale * rng.normal(0, 1 / np.sqrt(C), (C, P))
    data.update(overrides or {})
    with h5py.File(path, "w") as f:
        for name, value in data.items():
            f.create_dataset(name, data=np.asarray(value, dtype=np.float32))


def write_model_files(directory, opts: dict, seed: int = 0, **kwargs):
    """``(options.json, weights.hdf5)`` with random weights for ``opts`` in ``directory``."""
    opt_path, weight_path = directory / "options.json", directory / "weights.hdf5"
    write_options(opt_path, opts)
    write_weights(weight_path, opts, np.random.default_rng(seed), **kwargs)
    return opt_path, weight_path


class NumpyElmo:
    """ELMo in float64, one sentence at a time, optional carried states per batch row."""

    def __init__(self, options: dict, weight_file, convention: str = "tf") -> None:
        self.options = options
        with h5py.File(weight_file, "r") as f:
            self.w: Dict[str, np.ndarray] = {}
            f.visititems(lambda name, obj: self.w.__setitem__(name, obj[...].astype(np.float64)) if isinstance(obj, h5py.Dataset) else None)
        cnn, lstm = options["char_cnn"], options["lstm"]
        self.filters = cnn["filters"]
        self.n_highway = cnn.get("n_highway") or 0
        self.act = np.tanh if cnn["activation"] == "tanh" else (lambda x: np.maximum(x, 0))
        self.max_chars = cnn.get("max_characters_per_token", 50)
        self.P, self.C, self.L = lstm["projection_dim"], lstm["dim"], lstm["n_layers"]
        self.cell_clip = lstm.get("cell_clip") or None
        self.proj_clip = lstm.get("proj_clip") or None
        self.skip = bool(lstm.get("use_skip_connections"))
        self.bilm_tf_graph = convention == "bilm-tf"  # stored semantics "tf", as model.py builds the graph
        self.convention = "tf" if self.bilm_tf_graph else convention
        self.clip_hits = {"cell": 0, "proj": 0}
        self.states: Dict[int, Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]]] = {}

    # -- token encoder -----------------------------------------------------
    def token_vector(self, ids: np.ndarray) -> np.ndarray:
        emb = self.w["char_embed"][ids]  # unshifted ids index the stored table directly
        feats = []
        for i, (width, count) in enumerate(self.filters):
            W = self.w[f"CNN/W_cnn_{i}"][0]  # (width, D, count)
            conv = np.stack([np.einsum("kd,kdn->n", emb[p : p + width], W) for p in range(len(ids) - width + 1)])
            feats.append(self.act(conv.max(0) + self.w[f"CNN/b_cnn_{i}"]))
        x = np.concatenate(feats)
        for k in range(self.n_highway):
            g = f"CNN_high_{k}"
            Wc, bc, Wt, bt = (self.w[f"{g}/{n}"] for n in ("W_carry", "b_carry", "W_transform", "b_transform"))
            if self.convention == "allennlp":
                # One Linear(F, 2F) with weight [Wt^T; -Wc^T], bias [bt; -bc]; y = g'x + (1-g')relu(t).
                weight = np.concatenate([Wt.T, -Wc.T], 0)
                bias = np.concatenate([bt, -bc])
                h = weight @ x + bias
                F = len(x)
                gate = sigmoid(h[F:])
                x = gate * x + (1 - gate) * np.maximum(h[:F], 0)
            else:
                carry = sigmoid(x @ Wc + bc)
                x = carry * np.maximum(x @ Wt + bt, 0) + (1 - carry) * x
        if self.bilm_tf_graph and len(x) < self.P:
            raise AssertionError("bilm-tf: assert n_filters > projection_dim")
        # AllenNLP always reads CNN_proj (KeyError when absent); bilm-tf only when F != P.
        if self.convention == "allennlp" or len(x) != self.P:
            x = x @ self.w["CNN_proj/W_proj"] + self.w["CNN_proj/b_proj"]
        return x

    # -- LSTM --------------------------------------------------------------
    def _prefix(self, d: int, layer: int) -> str:
        # Both inference loaders read MultiRNNCell/Cell{l} (AllenNLP only that); bilm-tf's training
        # dump of a 1-layer model has no MultiRNNCell level, and the spec reads that layout too.
        name = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
        if self.convention == "tf" and self.L == 1 and f"{name}/W_0" not in self.w:
            return f"RNN_{d}/RNN/LSTMCell"
        return name

    def _clip(self, x, value, kind):
        if value is None:
            return x
        self.clip_hits[kind] += int(np.sum(np.abs(x) > value))
        return np.clip(x, -value, value)

    def _cell(self, d, layer, x, h, c):
        p = self._prefix(d, layer)
        W, B, WP = self.w[f"{p}/W_0"], self.w[f"{p}/B"], self.w[f"{p}/W_P_0"]
        C = self.C
        if self.convention == "allennlp":
            # Gates reordered i, j, f, o -> i, f, j, o; forget bias folded into the bias.
            order = np.concatenate([np.arange(0, C), np.arange(2 * C, 3 * C), np.arange(C, 2 * C), np.arange(3 * C, 4 * C)])
            bias = B.copy()
            bias[2 * C : 3 * C] += 1.0
            z = (np.concatenate([x, h]) @ W[:, order]) + bias[order]
            i, f, j, o = z[:C], z[C : 2 * C], z[2 * C : 3 * C], z[3 * C :]
            c = sigmoid(i) * np.tanh(j) + sigmoid(f) * c
        else:
            z = np.concatenate([x, h]) @ W + B
            i, j, f, o = z[:C], z[C : 2 * C], z[2 * C : 3 * C], z[3 * C :]
            c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
        c = self._clip(c, self.cell_clip, "cell")
        if self.bilm_tf_graph and self.P >= self.C:  # LSTMCell(dim) without num_proj
            if W.shape[0] != len(x) + C:
                raise ValueError(f"bilm-tf: invalid shape initializing {p}/W_0: {W.shape}")
            return sigmoid(o) * np.tanh(c), c
        h = self._clip((sigmoid(o) * np.tanh(c)) @ WP, self.proj_clip, "proj")
        return h, c

    def _run_direction(self, d: int, xs: np.ndarray, row: Optional[int]) -> List[np.ndarray]:
        """xs: (n, P) in processing order -> per layer (n, P) outputs in processing order."""
        outputs = []
        inp = xs
        for layer in range(self.L):
            key = (d, layer)
            if row is not None and key in self.states.get(row, {}):
                h, c = self.states[row][key]
            else:
                h, c = np.zeros(self.P), np.zeros(self.C)
            out = []
            for t in range(len(inp)):
                h, c = self._cell(d, layer, inp[t], h, c)
                out.append(h + inp[t] if (self.skip and layer > 0) else h)
            if row is not None:
                self.states.setdefault(row, {})[key] = (h, c)
            out = np.stack(out)
            outputs.append(out)
            inp = out
        return outputs

    def sentence(self, tokens: Sequence[str], row: Optional[int] = None, keep_boundaries: bool = False) -> np.ndarray:
        """``(L + 1, n, 2P)`` layers of one sentence; ``row`` carries states (stateful mode);
        ``keep_boundaries``: ``(L + 1, n + 2, 2P)`` with the ``<S>`` and ``</S>`` positions."""
        ids = [spell_marker(BOS, self.max_chars)] + [spell(t, self.max_chars) for t in tokens]
        ids.append(spell_marker(EOS, self.max_chars))
        xs = np.stack([self.token_vector(i) for i in ids])
        fwd = self._run_direction(0, xs, row)
        bwd = [o[::-1] for o in self._run_direction(1, xs[::-1], row)]
        layers = [np.concatenate([xs, xs], -1)] + [np.concatenate([f, b], -1) for f, b in zip(fwd, bwd)]
        return np.stack(layers) if keep_boundaries else np.stack(layers)[:, 1:-1]

    def batch(self, sentences: Sequence[Sequence[str]], stateful: bool = False, keep_boundaries: bool = False) -> List[np.ndarray]:
        return [self.sentence(s, row=i if stateful else None, keep_boundaries=keep_boundaries) for i, s in enumerate(sentences)]


def numpy_scalar_mix(layers: Sequence[np.ndarray], w: np.ndarray, gamma: float, mask=None) -> np.ndarray:
    """layers: (B, T, D) arrays; the masked whole-tensor layer norm when ``mask`` is given."""
    s = np.exp(w - w.max())
    s = s / s.sum()
    if mask is not None:
        m = mask[..., None].astype(np.float64)
        normed = []
        for a in layers:
            n = m.sum() * a.shape[-1]
            mean = (a * m).sum() / n
            var = (((a - mean) * m) ** 2).sum() / n
            normed.append((a - mean) / np.sqrt(var + 1e-13))
        layers = normed
    return gamma * sum(si * a for si, a in zip(s, layers))


def options(
    filters=((1, 4), (2, 6), (3, 8), (5, 6)),
    n_highway=2,
    P=8,
    C=12,
    L=2,
    clip=3.0,
    skip=True,
    activation="relu",
    max_chars=50,
    D=4,
) -> dict:
    lstm = {"dim": C, "projection_dim": P, "n_layers": L, "use_skip_connections": skip}
    if clip is not None:
        lstm["cell_clip"] = clip
        lstm["proj_clip"] = clip
    return {
        "lstm": lstm,
        "char_cnn": {
            "activation": activation,
            "filters": [list(f) for f in filters],
            "n_highway": n_highway,
            "embedding": {"dim": D},
            "n_characters": 262,
            "max_characters_per_token": max_chars,
        },
    }


def write_options(path, opts: dict) -> None:
    with open(path, "w") as f:
        json.dump(opts, f)
