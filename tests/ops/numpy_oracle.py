"""An independent float64 NumPy oracle of the three ELMo kernels.

Written from the equations of the spec (docs/elmo-spec.md sections 2 and 3),
not from the reference module: loops over tokens, positions and timesteps, no
vectorised tricks, so that it is easy to check by reading.
"""

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def char_cnn(char_ids, embedding, weights, biases, activation="relu"):
    """char_ids (N, W) shifted ids; embedding (261, D); weights[i] (count, D, width)."""
    ids = np.asarray(char_ids)
    emb = np.asarray(embedding, dtype=np.float64)
    table = np.concatenate([np.zeros((1, emb.shape[1])), emb], 0)  # id 0 -> zeros
    n_tok, n_chars = ids.shape
    outs = []
    for w, b in zip(weights, biases):
        w = np.asarray(w, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        count, _, width = w.shape
        res = np.empty((n_tok, count))
        for n in range(n_tok):
            x = table[ids[n]]  # (W, D)
            best = np.full(count, -np.inf)
            for p in range(n_chars - width + 1):
                window = x[p : p + width]  # (width, D)
                conv = np.einsum("kd,fdk->f", window, w) + b
                best = np.maximum(best, conv)
            res[n] = np.maximum(best, 0.0) if activation == "relu" else np.tanh(best)
        outs.append(res)
    return np.concatenate(outs, 1)


def char_cnn_backward(char_ids, embedding, weights, grad, out, argmax, activation="relu"):
    """Gradients (table, weights, biases) of :func:`char_cnn` for the output gradient ``grad``,
    the output ``out`` and each channel's window position ``argmax`` (N, F), by loops."""
    ids = np.asarray(char_ids)
    emb = np.asarray(embedding, dtype=np.float64)
    grad = np.asarray(grad, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64)
    argmax = np.asarray(argmax)
    # ReLU's derivative as a select: 0 where the output is 0, whatever the incoming gradient
    # (inf included: a 0/1 mask would give inf * 0 = NaN), as torch's threshold_backward
    g = np.where(out > 0, grad, 0.0) if activation == "relu" else grad * (1.0 - out * out)
    d_emb = np.zeros_like(emb)
    d_ws, d_bs, first = [], [], 0
    for w in weights:
        w = np.asarray(w, dtype=np.float64)
        count, dim, width = w.shape
        d_w = np.zeros_like(w)
        for n in range(ids.shape[0]):
            for c in range(count):
                gv, p = g[n, first + c], argmax[n, first + c]
                for k in range(width):
                    row = ids[n, p + k]
                    if row > 0:  # id 0: no character, no table row
                        d_w[c, :, k] += gv * emb[row - 1]
                        d_emb[row - 1] += gv * w[c, :, k]
        d_ws.append(d_w)
        d_bs.append(g[:, first : first + count].sum(0))
        first += count
    return d_emb, d_ws, d_bs


def highway(x, weight, bias):
    """TF semantics: y = g * relu(t) + (1 - g) * x; weight rows [transform; carry]."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    f = x.shape[-1]
    t = np.maximum(x @ w[:f].T + b[:f], 0.0)
    g = sigmoid(x @ w[f:].T + b[f:])
    return g * t + (1.0 - g) * x


def _clip(v, c):
    return v if c is None else np.clip(v, -c, c)


def lstm_layer(x, lengths, w_input, w_recurrent, bias, w_proj, h0=None, c0=None, cell_clip=None,
               proj_clip=None, reverse=False, residual=False):
    """One LSTM-with-projection direction, row by row (TF LSTMCell, gate blocks i, j, f, o)."""
    x = np.asarray(x, dtype=np.float64)
    wi = np.asarray(w_input, dtype=np.float64)
    wr = np.asarray(w_recurrent, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    wp = np.asarray(w_proj, dtype=np.float64)
    n_batch, n_time, _ = x.shape
    cells, proj = wp.shape
    out = np.zeros((n_batch, n_time, proj))
    h_n = np.zeros((n_batch, proj))
    c_n = np.zeros((n_batch, cells))
    for r in range(n_batch):
        h = np.zeros(proj) if h0 is None else np.asarray(h0[r], dtype=np.float64).copy()
        c = np.zeros(cells) if c0 is None else np.asarray(c0[r], dtype=np.float64).copy()
        length = int(lengths[r])
        order = range(length - 1, -1, -1) if reverse else range(length)
        for pos in order:
            z = np.concatenate([x[r, pos], h]) @ np.concatenate([wi, wr], 0) + b
            i, j, f, o = np.split(z, 4)
            c = sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j)
            c = _clip(c, cell_clip)
            h = _clip((sigmoid(o) * np.tanh(c)) @ wp, proj_clip)
            out[r, pos] = h + (x[r, pos] if residual else 0.0)
        h_n[r], c_n[r] = h, c
    return out, h_n, c_n


def sampled_logsumexp(h, weight, offset, hit):
    """Sampled softmax's log-sum-exp, row by row, and d lse / d logits (the softmax).

    h (N, P), weight (S, P), offset (S,), hit (N,): the column removed from row n
    (-1: none). Returns (lse (N,), softmax (N, S)); a removed column has softmax 0,
    a row with every column removed has lse -inf.
    """
    h = np.asarray(h, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    off = np.asarray(offset, dtype=np.float64)
    n_rows, n_cand = h.shape[0], w.shape[0]
    lse, soft = np.empty(n_rows), np.zeros((n_rows, n_cand))
    for n in range(n_rows):
        keep = [s for s in range(n_cand) if s != hit[n]]
        if not keep:
            lse[n] = -np.inf
            continue
        logits = np.array([h[n] @ w[s] + off[s] for s in keep])
        m = logits.max()
        e = np.exp(logits - m)
        lse[n] = m + np.log(e.sum())
        soft[n, keep] = e / e.sum()
    return lse, soft
