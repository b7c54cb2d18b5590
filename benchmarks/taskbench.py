"""Shared machinery of the task benchmarks (``ner_conll2003.py``, ``textcat_bench.py``).

* :func:`resolve_elmo` -- the biLM to benchmark (``--elmo`` or the bundled default), with a
  message that names the fix when there is none;
* :func:`task_config` -- a spaCy training config for one *setting*, generated from
  ``spacy_elmo/configs/ner.cfg`` / ``textcat.cfg`` through :class:`thinc.api.Config` (never a
  copied file): ``baseline`` (spaCy's own ``spacy.Tok2Vec.v2`` with the config's own
  embed/encode), ``listener`` (``spacy_elmo.ElmoListener.v1`` alone as the tok2vec) and
  ``tok2vec`` (``spacy_elmo.ElmoTok2Vec.v1``, the config as written);
* :func:`finetune_bilm` -- the biLM fine-tuned (LM objective, no labels) on a task's
  training text with ``python -m spacy_elmo pretrain --init``, cached by its parameters and
  the content of what it reads;
* :func:`train_pipeline` -- ``spacy train`` through its Python API;
* :func:`evaluate_pipeline` -- one evaluation on a test ``.spacy`` file with spaCy's scorer
  (plus accuracy for exclusive text classification);
* :func:`write_outputs` -- results JSON, a markdown table and a PNG chart.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from benchmarks.results_json import write_json
from spacy_elmo import switches
from spacy_elmo.configs import CONFIG_DIR

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = CONFIG_DIR
RESULTS_DIR = ROOT / "benchmarks" / "results"

#: setting -> one-line description (also written into the results JSON).
SETTING_DOCS = {
    "baseline": "spaCy's own tok2vec (MultiHashEmbed + MaxoutWindowEncoder), no ELMo",
    "listener": "ELMo listener alone (ScalarMix of the biLM layers + dropout) as the tok2vec",
    "tok2vec": "ElmoTok2Vec: [x_k; ELMo_k] -> Maxout -> MaxoutWindowEncoder (the paper's recipe)",
    "finetuned": "ElmoTok2Vec with the biLM first fine-tuned (LM objective) on the task's training text",
}


def bench_cache() -> Path:
    """Work directory root for benchmark data and trained pipelines (outside git)."""
    return Path(switches.read(switches.CACHE)).expanduser() / "bench"


# ---------------------------------------------------------------------------------------
# The biLM
# ---------------------------------------------------------------------------------------


def resolve_elmo(path: str | None) -> Path:
    """The biLM directory to use: ``path``, or the bundled default model when ``path`` is
    None / ``""`` / ``"default"``.  Exits with a message naming the fix when there is none."""
    from spacy_elmo.bilm.native_io import DEFAULT_MODEL_DIR

    if path in (None, "", "default"):
        if (DEFAULT_MODEL_DIR / "config.json").exists():
            return DEFAULT_MODEL_DIR
        raise SystemExit(
            f"No bundled default ELMo model at {DEFAULT_MODEL_DIR}.\n"
            "Pass --elmo DIR (a directory written by BiLM.save or `python -m spacy_elmo pretrain`, "
            "or one holding an AllenNLP options.json + .hdf5), or train the default model first with\n"
            "    python benchmarks/train_default.py"
        )
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise SystemExit(f"--elmo {path}: no such directory (pass a biLM directory written by BiLM.save)")
    if not (p / "config.json").exists() and not list(p.glob("*.hdf5")):
        raise SystemExit(
            f"--elmo {path}: neither config.json (BiLM.save) nor an AllenNLP .hdf5 file is in it; "
            "pass the directory that holds the model files"
        )
    return p


def display_path(path: Path) -> str:
    """A path as the results markdown shows it: ``default (spacy_elmo/data/default)`` for the
    bundled model, repo-relative inside the checkout, ``~/...`` under the home directory."""
    from spacy_elmo.bilm.native_io import DEFAULT_MODEL_DIR

    path = Path(path).resolve()
    if path == DEFAULT_MODEL_DIR.resolve():
        return "default (the bundled model, spacy_elmo/data/default)"
    for base, prefix in ((ROOT, ""), (Path.home(), "~/")):
        if path.is_relative_to(base.resolve()):
            return prefix + str(path.relative_to(base.resolve()))
    return str(path)


def bilm_files(path: Path, softmax: bool = False) -> list[Path]:
    """The files a biLM directory's model is read from: ``config.json``, ``model.safetensors`` and
    ``initial_state.safetensors`` where present (what ``BiLM.load`` reads), or AllenNLP's options
    ``.json`` and ``.hdf5``. ``softmax``: also what ``pretrain --init`` reads besides, ``vocab.txt`` and
    ``softmax.safetensors`` (an AllenNLP directory's softmax) where present."""
    from spacy_elmo.bilm.native_io import CONFIG_NAME, INITIAL_STATE_NAME, WEIGHTS_NAME, allennlp_files_of
    from spacy_elmo.training.modelio import SOFTMAX_FILE
    from spacy_elmo.training.vocab import VOCAB_NAME

    found = allennlp_files_of(Path(path))
    files = list(found) if found is not None else [Path(path) / n for n in (CONFIG_NAME, WEIGHTS_NAME, INITIAL_STATE_NAME)]
    if softmax:
        files += [Path(path) / n for n in (VOCAB_NAME, SOFTMAX_FILE)]
    return [f for f in files if f.exists()]


@functools.lru_cache(maxsize=None)
def _sha1_of(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha1()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """The SHA-1 of a file's bytes (read once per path, size and modification time: a model's
    weights are hashed once a benchmark run, not once per training run)."""
    st = Path(path).stat()
    return _sha1_of(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def bilm_digest(path: Path, softmax: bool = False) -> dict[str, str]:
    """``{file name: SHA-1}`` of the biLM directory's model files (:func:`bilm_files`; ``softmax``: with its
    vocabulary and softmax, for what ``pretrain --init`` reads)."""
    return {f.name: file_digest(f) for f in bilm_files(path, softmax)}


def elmo_description(path: Path) -> dict:
    """What the results record about a biLM directory: path, sizes, provenance and its files'
    SHA-1 (the same as in the idents of the runs that read it)."""
    info: dict[str, Any] = {"path": str(path), "files_sha1": bilm_digest(path)}
    cfg = path / "config.json"
    if cfg.exists():
        meta = json.loads(cfg.read_text(encoding="utf-8"))
        c = meta.get("config", {})
        info.update({k: c.get(k) for k in ("projection_dim", "cell_dim", "n_layers")})
        info["provenance"] = meta.get("provenance", {})
    return info


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------


def load_base_config(path: Path):
    """The config file, not interpolated (``${paths.*}`` stay variables)."""
    from thinc.api import Config

    if not Path(path).exists():
        raise SystemExit(f"{path} is missing: the benchmark generates its configs from it (see issue 4)")
    return Config().from_disk(path, interpolate=False)


def _section(cfg, dotted: str) -> dict:
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise SystemExit(f"the base config has no [{dotted}] section; it is needed to build the benchmark settings")
        node = node[part]
    return node


def task_config(base, component: str, setting: str):
    """A copy of ``base`` whose ``component`` uses the tok2vec of ``setting``
    (``baseline``, ``listener``, ``tok2vec`` or ``finetuned``; the last is ``tok2vec``
    with other weights)."""
    from thinc.api import Config

    cfg = Config(base).copy()
    t2v = _section(cfg, f"components.{component}.model.tok2vec")
    if setting in ("tok2vec", "finetuned"):
        return cfg
    if setting == "listener":
        cfg["components"][component]["model"]["tok2vec"] = dict(_section(cfg, f"components.{component}.model.tok2vec.elmo"))
        return cfg
    if setting != "baseline":
        raise ValueError(f"unknown setting {setting!r}; use one of {list(SETTING_DOCS)}")
    cfg["components"][component]["model"]["tok2vec"] = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": dict(t2v["embed"]),
        "encode": dict(t2v["encode"]),
    }
    cfg["nlp"]["pipeline"] = [p for p in cfg["nlp"]["pipeline"] if p != "elmo"]
    cfg["components"].pop("elmo", None)
    cfg["initialize"].get("components", {}).pop("elmo", None)
    return cfg


def training_overrides(
    *, train: Path, dev: Path, elmo: Path | None, seed: int, max_steps: int | None,
    eval_frequency: int | None, patience: int | None, extra: dict | None = None,
) -> dict:
    """``spacy train`` overrides for one run."""
    o: dict[str, Any] = {"paths.train": str(train), "paths.dev": str(dev), "system.seed": seed, "training.seed": seed}
    if elmo is not None:
        o["paths.elmo"] = str(elmo)
    if max_steps is not None:
        o["training.max_steps"] = max_steps
    if eval_frequency is not None:
        o["training.eval_frequency"] = eval_frequency
    if patience is not None:
        o["training.patience"] = patience
    o.update(extra or {})
    return o


def run_ident(cfg, overrides: dict, bilm: Path | None, data: dict[str, Path]) -> dict:
    """What names one training run's result (its cache key, :func:`run_dir_for`): the config, the
    overrides and the content of what the run reads, the biLM's model files (:func:`bilm_digest`)
    and the ``data`` files (``{"train": path, ...}``), so that another model or data set written at
    the same paths trains anew instead of re-using the result of the old one."""
    return {"config": cfg.to_str(), "overrides": overrides,
            "bilm": None if bilm is None else bilm_digest(bilm),
            "data": {name: file_digest(path) for name, path in data.items()}}


def short_hash(obj) -> str:
    """10 hex digits naming a JSON-able ``obj`` (key order ignored): the cache key of a
    fine-tuned biLM or a run directory."""
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def bilm_for(setting: str, elmo: Path | None, tuned: Path | None) -> Path | None:
    """The biLM a run of ``setting`` reads: none for ``baseline``, the fine-tuned one for
    ``finetuned``, else ``elmo``."""
    if setting == "baseline":
        return None
    return tuned if setting == "finetuned" else elmo


# ---------------------------------------------------------------------------------------
# Fine-tuning the biLM on a task's text (the ``finetuned`` setting)
# ---------------------------------------------------------------------------------------

#: ``--quick``: a few steps of a tiny batch (a smoke run of the fine-tuning path).
QUICK_FINETUNE = {"steps": ["--max-steps", "4"], "extra": ["--batch-size", "8", "--negatives", "512"],
                  "stream_extra": ["--unroll", "10"]}  # pretrain refuses --unroll with --sentences


def add_finetune_args(p, default_epochs: float, text: str) -> None:
    """The ``--finetune-*`` options of a benchmark whose ``finetuned`` setting fine-tunes
    the biLM on ``text`` (e.g. "the CoNLL train text")."""
    p.add_argument("--finetune-epochs", type=float, default=default_epochs,
                   help=f"epochs of biLM fine-tuning on {text} (default {default_epochs:g})")
    p.add_argument("--finetune-reading", choices=("sentences", "stream"), default="sentences",
                   help="fine-tune on whole sentences from the start state (default; what the component reads) "
                        "or on bilm-tf's continuous streams")
    p.add_argument("--finetune-args", default="", help="extra options for `spacy_elmo pretrain` (e.g. \"--lr 0.1\")")


def finetune_bilm(args, elmo: Path, train_text: Path, heldout_text: Path, gpu_id: int, what: str) -> Path:
    """``elmo`` fine-tuned on ``train_text`` (UTF-8, one paragraph or sentence per line;
    ``heldout_text`` for its perplexity), in ``args.work_dir / finetuned-<key>`` where the
    key hashes the parameters and the content of the biLM's model files (its vocab.txt and softmax too) and both texts: a finished fine-tuning is re-used, an interrupted one
    resumed from its checkpoint.  ``args`` carries ``quick`` and the
    :func:`add_finetune_args` options; ``gpu_id`` is the run's ``--gpu-id`` (:func:`pick_gpu`; -1: the CPU), the
    GPU spaCy trains on: pretrain runs on ``cuda:N`` (``cuda`` alone is GPU 0 in the new process); ``what`` names the
    text in the banner."""
    from spacy_elmo.training.checkpoint import checkpoint_path

    steps = QUICK_FINETUNE["steps"] if args.quick else ["--epochs", str(args.finetune_epochs)]
    extra = list(QUICK_FINETUNE["extra"]) if args.quick else []
    if args.finetune_reading == "sentences":
        extra.append("--sentences")
    elif args.quick:
        extra += QUICK_FINETUNE["stream_extra"]
    extra += args.finetune_args.split()
    if "--sentences" in extra and not any(a.split("=")[0] == "--length-pool" for a in extra):
        # pretrain's default batching changed (pools of 50, then random batches: --length-pool 1); naming it puts
        # it in the key, so a run of the old default (whose key had no --length-pool) is not re-used for this one
        extra += ["--length-pool", "1"]
    # keyed on what the fine-tuning reads (as run_ident keys the training runs), not on paths: another biLM or
    # text written at the same path is fine-tuned afresh instead of re-using the one tuned from the old files
    params = {"elmo": bilm_digest(elmo, softmax=True), "steps": steps, "extra": extra, "text": file_digest(train_text),
              "heldout": file_digest(heldout_text)}
    out = args.work_dir / f"finetuned-{short_hash(params)}"
    done = out / "finetune.json"
    if done.exists() and (out / "config.json").exists():
        print(f"re-using the fine-tuned biLM in {out}", flush=True)
        return out
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(train_text), str(out), "--init", str(elmo),
           "--heldout", str(heldout_text), "--device", f"cuda:{gpu_id}" if gpu_id >= 0 else "cpu",
           "--checkpoint-every", "100000",
           *steps, *extra]
    if checkpoint_path(out).exists():  # an interrupted fine-tuning: continue it
        cmd.append("--resume")
    banner(f"fine-tuning the biLM on {what}")
    print(" ".join(cmd), flush=True)
    start = time.perf_counter()
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"biLM fine-tuning failed (exit {res.returncode}); the command was:\n  {' '.join(cmd)}")
    done.write_text(json.dumps({**params, "command": cmd, "seconds": round(time.perf_counter() - start, 1)}, indent=2))
    return out


# ---------------------------------------------------------------------------------------
# Device
# ---------------------------------------------------------------------------------------


def pick_gpu(requested: int | None) -> int:
    """``--gpu-id``: -1 = CPU; None = GPU 0 when torch sees CUDA and cupy is importable
    (thinc needs cupy for spaCy's own layers), else CPU (saying why)."""
    if requested is not None:
        return requested
    try:
        import torch

        if not torch.cuda.is_available():
            return -1
    except ImportError:
        return -1
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("CUDA is available but cupy is not installed, so spaCy trains on the CPU; "
              "`pip install cupy-cuda12x` to train on the GPU (or pass --gpu-id -1 to silence this)", flush=True)
        return -1
    return 0


def environment(gpu_id: int = -1) -> dict:
    """Versions and machine facts recorded with every result; ``cuda``: the name of the run's GPU (``gpu_id``; for a
    CPU run, -1, that of GPU 0, as before), None without CUDA."""
    import spacy
    import thinc
    import torch

    return {
        "python": platform.python_version(), "spacy": spacy.__version__, "thinc": thinc.__version__,
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(max(gpu_id, 0)) if torch.cuda.is_available() else None,
        "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
    }


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------


def read_docs(path: Path, vocab=None) -> list:
    """Docs of a ``.spacy`` file."""
    import spacy
    from spacy.tokens import DocBin

    vocab = vocab or spacy.blank("en").vocab
    return list(DocBin().from_disk(path).get_docs(vocab))


def sample_docs(docs: Sequence, fraction: float, seed: int, key: Callable | None = None) -> list:
    """A seeded sample of ``round(fraction * len(docs))`` docs (at least 1), in the original
    order; with ``key`` (e.g. a doc's label), per key (stratified)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return list(docs)
    groups: dict[Any, list[int]] = {}
    for i, d in enumerate(docs):
        groups.setdefault(key(d) if key else None, []).append(i)
    rng = random.Random(seed)
    keep: list[int] = []
    for k in sorted(groups, key=str):
        idx = groups[k]
        keep.extend(rng.sample(idx, max(1, round(fraction * len(idx)))))
    return [docs[i] for i in sorted(keep)]


def train_subset(train: Path, fraction: float, seed: int, key: Callable | None = None) -> tuple[Path, int]:
    """The training ``.spacy`` file at ``fraction`` (a seeded :func:`sample_docs` of ``train``'s docs,
    stratified by ``key``) and its size. The sample is written beside ``train``, named by the
    fraction, the seed and ``train``'s content: a rewritten ``train`` gets a new sample."""
    docs = read_docs(train)
    if fraction == 1.0:
        return train, len(docs)
    sub = sample_docs(docs, fraction, seed, key=key)
    path = Path(train).parent / f"train-{fraction:g}-seed{seed}-{file_digest(train)[:10]}.spacy"
    if not path.exists():
        write_docbin(sub, path)
    return path, len(sub)


def write_docbin(docs: Iterable, path: Path) -> Path:
    from benchmarks.datasets import to_docbin

    return to_docbin(docs, path)


# ---------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------


def train_pipeline(cfg, out_dir: Path, overrides: dict, gpu_id: int) -> dict:
    """Write ``out_dir/config.cfg`` and run ``spacy train`` on it (Python API); returns
    ``{"train_seconds", "best_dev": {...}, "model": path of model-best}``."""
    from spacy.cli.train import train

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = out_dir / "config.cfg"
    cfg.to_disk(cfg_path)
    (out_dir / "overrides.json").write_text(json.dumps(overrides, indent=2) + "\n", encoding="utf-8")
    start = time.perf_counter()
    train(cfg_path, out_dir / "pipeline", use_gpu=gpu_id, overrides=overrides)
    seconds = time.perf_counter() - start
    best = out_dir / "pipeline" / "model-best"
    if not (best / "meta.json").exists():
        raise RuntimeError(f"spacy train wrote no {best}: see the training output above")
    meta = json.loads((best / "meta.json").read_text(encoding="utf-8"))
    return {"train_seconds": round(seconds, 1), "best_dev": meta.get("performance", {}), "model": str(best)}


def evaluate_pipeline(model_dir: Path, test_path: Path, gpu_id: int = -1, exclusive_cats: bool = False) -> dict:
    """Scores of ``model_dir`` on ``test_path`` from spaCy's scorer (as ``Language.evaluate``);
    with ``exclusive_cats``, also ``cats_accuracy`` (argmax of the predicted cats equals the
    gold label) and ``cats_macro_f`` from spaCy's scorer as is."""
    import spacy
    from spacy.scorer import Scorer
    from spacy.training import Example

    if gpu_id >= 0:
        from thinc.api import require_gpu, set_gpu_allocator

        set_gpu_allocator("pytorch")
        require_gpu(gpu_id)
    nlp = spacy.load(model_dir)
    refs = read_docs(test_path, nlp.vocab)
    start = time.perf_counter()
    # What Language.evaluate does, keeping the predicted docs (it scores copies).
    predicted = nlp.pipe((_bare(nlp, d) for d in refs), batch_size=nlp.batch_size)
    examples = [Example(p, r) for p, r in zip(predicted, refs)]
    seconds = time.perf_counter() - start
    scores = Scorer(nlp=nlp).score(examples)
    out = {k: v for k, v in scores.items() if isinstance(v, (int, float)) or k.endswith("per_type")}
    out["eval_seconds"] = round(seconds, 1)
    out["n_test_docs"] = len(examples)
    if exclusive_cats:
        hits = 0
        for eg in examples:
            gold = max(eg.reference.cats, key=eg.reference.cats.__getitem__)
            pred = max(eg.predicted.cats, key=eg.predicted.cats.__getitem__) if eg.predicted.cats else None
            hits += int(gold == pred)
        out["cats_accuracy"] = hits / max(1, len(examples))
    return out


def _bare(nlp, doc):
    """The reference doc's tokens without annotations (the gold tokenisation)."""
    from spacy.tokens import Doc

    return Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])


# ---------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------


def _score(value: float | None) -> float | None:
    """A run's score, or None where it has none (missing, or NaN)."""
    return None if value is None or math.isnan(value) else value


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and standard deviation (0.0 for one value) of the scores among ``values``; ``(None, None)`` where
    no run has one (null in the JSON: standard JSON has no NaN)."""
    vals = [v for v in map(_score, values) if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def summarize(runs: list[dict], group_keys: Sequence[str], metrics: Sequence[str]) -> list[dict]:
    """One row per distinct ``group_keys`` value: mean and std over seeds of each metric."""
    rows: dict[tuple, dict] = {}
    for r in runs:
        key = tuple(r[k] for k in group_keys)
        row = rows.setdefault(key, {**{k: r[k] for k in group_keys}, "seeds": [], **{m: [] for m in metrics}})
        row["seeds"].append(r["seed"])
        for m in metrics:
            row[m].append(r["test"].get(m))
    out = []
    for row in rows.values():
        for m in metrics:
            mu, sd = mean_std(row[m])
            row[m] = {"mean": mu, "std": sd, "values": [_score(v) for v in row[m]]}
        out.append(row)
    return out


def markdown_table(rows: list[dict], group_keys: Sequence[str], metrics: dict[str, str], title: str,
                   baseline_key: str | None = None, notes: Sequence[str] = ()) -> str:
    """A markdown table: one line per row, metrics as percentages (mean +- std over seeds);
    with ``baseline_key`` (a metric), a "vs baseline" column for the first metric."""
    first = next(iter(metrics))
    head = [*group_keys, *metrics.values(), "seeds"]
    if baseline_key:
        head.insert(len(group_keys) + 1, f"{metrics[first]} vs baseline")
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = {tuple(r[k] for k in group_keys if k != "setting"): r[first]["mean"] for r in rows if r.get("setting") == "baseline"}
    for r in rows:
        cells = [str(r[k]) for k in group_keys]
        vals = [_pct(r[m]) for m in metrics]
        if baseline_key:
            b = base.get(tuple(r[k] for k in group_keys if k != "setting"))
            diff = ("" if b is None or r[first]["mean"] is None or r.get("setting") == "baseline"
                    else f"{100 * (r[first]['mean'] - b):+.2f}")
            vals.insert(1, diff)
        lines.append("| " + " | ".join(cells + vals + [",".join(map(str, r["seeds"]))]) + " |")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _pct(v: dict) -> str:
    if v["mean"] is None:
        return "n/a"
    s = f"{100 * v['mean']:.2f}"
    return s + (f" ± {100 * v['std']:.2f}" if len(v["values"]) > 1 else "")


def bar_chart(rows: list[dict], group_key: str, series_key: str, metrics: dict[str, str], title: str, path: Path) -> None:
    """Grouped bars: one panel per metric, groups = ``group_key`` values, bars = ``series_key``
    values; error bars = std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys(r[group_key] for r in rows))
    series = list(dict.fromkeys(r[series_key] for r in rows))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics) + 1, 4), squeeze=False)
    width = 0.8 / max(1, len(series))
    for ax, (m, label) in zip(axes[0], metrics.items()):
        for j, s in enumerate(series):
            xs, ys, es = [], [], []
            for i, g in enumerate(groups):
                r = next((r for r in rows if r[group_key] == g and r[series_key] == s), None)
                if r is not None and r[m]["mean"] is not None:
                    xs.append(i + (j - (len(series) - 1) / 2) * width)
                    ys.append(100 * r[m]["mean"])
                    es.append(100 * r[m]["std"])
            bars = ax.bar(xs, ys, width, yerr=es, label=s, capsize=3)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(groups)), [str(g) for g in groups])
        ax.set_ylabel(f"{label} (%)")
        ax.set_title(label)
    axes[0][0].legend(fontsize=8)
    import textwrap

    fig.suptitle(textwrap.fill(title, 70), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(record: dict, markdown: str, chart: Callable[[Path], None], out_dir: Path, stem: str) -> list[Path]:
    """``out_dir/<stem>.json``, ``.md`` and ``.png``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png"]
    write_json(paths[0], record, default=str)
    paths[1].write_text(markdown, encoding="utf-8")
    chart(paths[2])
    return paths


def parse_list(text: str, cast=str) -> list:
    return [cast(x.strip()) for x in text.split(",") if x.strip()]


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)
    sys.stdout.flush()


def stored_result(run_dir: Path, ident: dict) -> dict | None:
    """The result a finished run with this config and these overrides stored in ``run_dir``,
    else None."""
    path = Path(run_dir) / "result.json"
    if not path.exists():
        return None
    rec = json.loads(path.read_text(encoding="utf-8"))
    return rec["result"] if rec.get("ident") == ident else None


def run_dir_for(root: Path, name: str, ident: dict) -> Path:
    """The directory of run ``name`` (e.g. ``tok2vec-f0.1-seed0``) with this config and these
    overrides: ``root/name-<hash of ident>``, so that runs that differ only in their overrides
    (steps, patience, the biLM) keep their own pipelines and results instead of replacing each
    other's. A finished run stored under the plain ``root/name`` (the layout before the hash)
    with the same ident is found there."""
    legacy = Path(root) / name
    if stored_result(legacy, ident) is not None:
        return legacy
    return Path(root) / f"{name}-{short_hash(ident)}"


def cached_result(run_dir: Path, ident: dict, force: bool) -> dict | None:
    """The stored result of a finished run with the same config and overrides, else None
    (always None with ``force``)."""
    result = None if force else stored_result(run_dir, ident)
    if result is not None:
        print(f"re-using {Path(run_dir) / 'result.json'} (--force to retrain)", flush=True)
    return result


def store_result(run_dir: Path, ident: dict, result: dict) -> None:
    """Keep a finished run's result so that re-running the benchmark re-uses it."""
    path = Path(run_dir) / "result.json"
    write_json(path, {"ident": ident, "result": result}, default=str)
