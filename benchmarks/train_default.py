"""The reproducible recipe of the bundled default English model (issue 6, deliverable 2).

1. The corpus: ``benchmarks/corpus.py`` (``train.txt`` / ``heldout.txt``, built once into
   ``~/.cache/spacy-elmo/corpus/en`` unless ``--corpus`` names another directory).
2. Pretraining with the project's own command, in *chunks* of ``--chunk-steps`` steps::

       python -m spacy_elmo pretrain TRAIN RUN_DIR --preset small --vocab-size 50000 \\
           --heldout HELDOUT --max-steps K*CHUNK --checkpoint-every CHUNK [--resume] --device cuda

   After every chunk the trainer's full-softmax held-out perplexity is read from the run's
   log; the best model so far is copied to ``WORK/best``.  Training stops when the mean
   perplexity has not improved by ``--min-improvement`` (relative) for ``--patience``
   chunks, or at ``--max-total-steps``.  Every chunk ends in a checkpoint and the state is
   kept in ``WORK/recipe.json``, so the same command continues an interrupted run exactly
   (``--max-chunks N`` bounds the work of one session).
   Stage 2 (what the shipped model went through): ``--init WORK1/best-or-a-checkpoint --sentences
   --work-dir WORK2`` continues from the stream model on whole sentences read from the start state,
   which is how the ``elmo`` component reads text (bilm-tf's streams almost never start from zeros);
   it selects on held-out perplexity per sentence.
3. Conversion: the best model -> ``spacy_elmo/data/default/`` as float16 safetensors with
   the softmax (``BiLM.save(..., extra_tensors=softmax, dtype=torch.float16)``) plus
   ``vocab.txt``, provenance in ``config.json``; then the converted model's held-out
   perplexity (forward / backward / mean) is measured and printed.

    python benchmarks/train_default.py                      # train (or continue) + convert
    python benchmarks/train_default.py --max-chunks 3       # at most 3 chunks this session
    python benchmarks/train_default.py --convert-only       # convert WORK/best now

Smoke test (tiny model, a few steps, into a temp dir)::

    python benchmarks/train_default.py --options tiny.json --chunk-steps 3 --max-total-steps 6 \\
        --vocab-size 2000 --min-vocab 0 --batch-size 8 --negatives 256 --work-dir /tmp/w --out /tmp/w/default \\
        --train-text small.txt --heldout-text small_heldout.txt
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.results_json import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "spacy_elmo" / "data" / "default"
MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt")
#: Options that must stay the same for ``--resume`` to continue a run exactly.
RUN_KEYS = ("preset", "options", "vocab_size", "min_count", "batch_size", "unroll", "negatives", "seed",
            "optimizer", "lr", "dropout", "train_text", "heldout_text")


def cache_root() -> Path:
    from benchmarks.fetch import cache_dir

    return cache_dir()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, default=None, help="corpus directory (default ~/.cache/spacy-elmo/corpus/en; built if missing)")
    p.add_argument("--train-text", type=Path, default=None, help="training text (default CORPUS/train.txt)")
    p.add_argument("--heldout-text", type=Path, default=None, help="held-out text (default CORPUS/heldout.txt)")
    p.add_argument("--work-dir", type=Path, default=None, help="run directory, checkpoints, best model (default ~/.cache/spacy-elmo/default-model)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the float16 model goes (default spacy_elmo/data/default)")
    p.add_argument("--preset", default="small", help="model size preset (default small: 2 x 1024 cells, 128 projection)")
    p.add_argument("--options", type=Path, default=None, help="BiLMConfig / AllenNLP options JSON instead of --preset (smoke tests)")
    p.add_argument("--vocab-size", type=int, default=50_000, help="vocabulary cap incl. <S>, </S>, <UNK> (default 50,000)")
    p.add_argument("--min-vocab", type=int, default=30_000, help="fail unless the vocabulary has at least this many types")
    p.add_argument("--min-count", type=int, default=1, help="smallest count of a vocabulary word")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--unroll", type=int, default=20)
    p.add_argument("--negatives", type=int, default=8192)
    p.add_argument("--optimizer", default="adagrad")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", type=Path, default=None,
                   help="start from this model (stage 2: WORK/best of the stream stage) instead of random weights")
    p.add_argument("--sentences", action="store_true",
                   help="train and select on whole sentences from the start state (what the elmo component reads); "
                   "held-out perplexity per sentence")
    p.add_argument("--max-length", type=int, default=100, help="with --sentences: longest piece of a sentence")
    p.add_argument("--length-pool", type=int, default=None,
                   help="with --sentences: pretrain --length-pool (default pretrain's, 1: random batches; the shipped "
                   "model was trained in pools of 50, the only behaviour then)")
    p.add_argument("--chunk-steps", type=int, default=2000, help="steps between held-out evaluations (default 2000)")
    p.add_argument("--patience", type=int, default=2, help="chunks without improvement before stopping (default 2)")
    p.add_argument("--min-improvement", type=float, default=0.005, help="relative perplexity drop that counts (default 0.5%%)")
    p.add_argument("--max-total-steps", type=int, default=200_000, help="hard limit on steps (default 200,000)")
    p.add_argument("--max-chunks", type=int, default=None, help="at most this many chunks in this invocation")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cuda or cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--convert-only", action="store_true", help="skip training: convert WORK/best")
    p.add_argument("--no-convert", action="store_true", help="train only")
    p.add_argument("--force", action="store_true", help="overwrite an existing model in --out")
    args = p.parse_args(argv)
    args.work_dir = (args.work_dir or cache_root() / "default-model").resolve()
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


# -- corpus ------------------------------------------------------------------------------


def corpus_files(args) -> tuple[Path, Path]:
    """``(train, heldout)`` texts; builds the corpus with benchmarks/corpus.py if needed."""
    if args.train_text and args.heldout_text:
        return args.train_text.resolve(), args.heldout_text.resolve()
    corpus = (args.corpus or cache_root() / "corpus" / "en").resolve()
    if not (corpus / "train.txt").exists() or not (corpus / "heldout.txt").exists():
        print(f"building the pretraining corpus into {corpus}", flush=True)
        cmd = [sys.executable, str(ROOT / "benchmarks" / "corpus.py"), str(corpus)]
        if subprocess.run(cmd).returncode != 0:
            raise SystemExit(f"the corpus build failed: {' '.join(cmd)}")
    return (args.train_text or corpus / "train.txt").resolve(), (args.heldout_text or corpus / "heldout.txt").resolve()


# -- recipe state --------------------------------------------------------------------------


def load_state(args, run: dict) -> dict:
    """``WORK/recipe.json``: the run options (must match on resume) and one entry per chunk."""
    path = args.work_dir / "recipe.json"
    if not path.exists():
        return {"run": run, "chunks": [], "best": None, "stopped": None}
    state = json.loads(path.read_text(encoding="utf-8"))
    if state["run"] != run:
        diff = {k: (state["run"].get(k), run.get(k)) for k in run if state["run"].get(k) != run.get(k)}
        raise SystemExit(
            f"{args.work_dir} holds a run with other options {diff} (stored, given): pass the stored options to "
            "continue it, or another --work-dir to start a new run"
        )
    return state


def save_state(args, state: dict) -> None:
    path = args.work_dir / "recipe.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def heldout_at(run_dir: Path, step: int) -> dict | None:
    """The trainer's held-out evaluation logged at ``step`` (``train_log.jsonl``), as ``evaluate_model_dir`` gives
    one: a perplexity past a float's range, logged as null (``json_ready``), is inf (``from_json_ready``)."""
    from spacy_elmo.training.evaluate import from_json_ready
    from spacy_elmo.training.trainer import read_log

    found = [e for e in read_log(run_dir) if e.get("event") == "heldout" and e.get("step") == step]
    return from_json_ready(found[-1]) if found else None


# -- training ------------------------------------------------------------------------------


def pretrain_chunk(args, train: Path, heldout: Path, target: int, resume: bool) -> None:
    """Run ``spacy_elmo pretrain`` up to ``target`` total steps."""
    run_dir = args.work_dir / "run"
    cmd = [sys.executable, "-m", "spacy_elmo", "pretrain", str(train), str(run_dir), "--heldout", str(heldout),
           "--max-steps", str(target),
           "--checkpoint-every", str(args.chunk_steps), "--batch-size", str(args.batch_size),
           "--negatives", str(args.negatives), "--optimizer", args.optimizer, "--dropout", str(args.dropout),
           "--seed", str(args.seed), "--device", args.device]
    if args.init:  # the architecture and vocabulary come from the model (pretrain ignores it on --resume)
        cmd += ["--init", str(args.init.resolve())]
    else:  # (pretrain warns that --vocab-size / --min-count are unused with --init)
        cmd += ["--vocab-size", str(args.vocab_size), "--min-count", str(args.min_count)]
        cmd += ["--options", str(args.options)] if args.options else ["--preset", args.preset]
    if args.sentences:  # (pretrain refuses --unroll with --sentences, --max-length without)
        cmd += ["--sentences", "--max-length", str(args.max_length)]
        if args.length_pool is not None:  # not in recipe.json: pretrain's --resume keeps its checkpoint's, or refuses
            cmd += ["--length-pool", str(args.length_pool)]
    else:
        cmd += ["--unroll", str(args.unroll)]
    if args.lr is not None:
        cmd += ["--lr", str(args.lr)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if resume:
        cmd.append("--resume")
    print("$ " + " ".join(cmd), flush=True)
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"pretraining failed (exit {res.returncode}); rerun this script to resume from the last checkpoint")


def check_vocab(args) -> int:
    n = sum(1 for _ in open(args.work_dir / "run" / "vocab.txt", encoding="utf-8"))
    if n < args.min_vocab:
        raise SystemExit(
            f"the vocabulary has {n:,} types, fewer than --min-vocab {args.min_vocab:,}: use a larger corpus, "
            "a larger --vocab-size or a smaller --min-count (and a new --work-dir)"
        )
    return n


def train_loop(args, state: dict, train: Path, heldout: Path) -> None:
    """Chunks until held-out perplexity stops improving (or a limit is reached)."""
    from spacy_elmo.training.evaluate import perplexity_text

    run_dir = args.work_dir / "run"
    done_now = 0
    while state["stopped"] is None:
        if args.max_chunks is not None and done_now >= args.max_chunks:
            print(f"--max-chunks {args.max_chunks} reached; rerun the same command to continue", flush=True)
            return
        step = state["chunks"][-1]["step"] if state["chunks"] else 0
        target = min(step + args.chunk_steps, args.max_total_steps)
        resume = (run_dir / "checkpoint.pt").exists()
        print(f"\n=== chunk {len(state['chunks']) + 1}: steps {step} -> {target} ===", flush=True)
        start = time.perf_counter()
        pretrain_chunk(args, train, heldout, target, resume)
        h = heldout_at(run_dir, target)
        if h is None:  # killed between the checkpoint and its evaluation: evaluate now
            from spacy_elmo.training.evaluate import evaluate_model_dir

            h = evaluate_model_dir(str(run_dir), heldout, device=args.device, progress=True)
        vocab = check_vocab(args)
        entry = {"step": target, "seconds": round(time.perf_counter() - start, 1), "vocab_size": vocab,
                 **{k: h[k] for k in ("perplexity", "perplexity_forward", "perplexity_backward", "loss_forward",
                                      "loss_backward") if k in h}}
        state["chunks"].append(entry)
        best = state["best"]
        if best is None or entry["perplexity"] < best["perplexity"] * (1 - args.min_improvement):
            copy_model(run_dir, args.work_dir / "best")
            state["best"] = entry
            tag = "new best"
        else:
            tag = f"no improvement over {_mean_shown(best)} (step {best['step']})"
        print(f"step {target}: held-out {perplexity_text(h)} -- {tag}", flush=True)
        since = sum(1 for c in state["chunks"] if c["step"] > state["best"]["step"])
        if since >= args.patience:
            state["stopped"] = f"no improvement for {since} chunks"
        elif target >= args.max_total_steps:
            state["stopped"] = f"--max-total-steps {args.max_total_steps} reached"
        save_state(args, state)
        done_now += 1
    print(f"training finished: {state['stopped']}; best step {state['best']['step']}, "
          f"held-out perplexity {_mean_shown(state['best'])}", flush=True)


def _mean_shown(entry: dict) -> str:
    """A chunk's (mean) held-out perplexity as ``perplexity_text`` shows it: past a float's range with its mean loss
    (a chunk recorded before its losses were: ``inf``)."""
    from spacy_elmo.training.evaluate import mean_loss, perplexity_shown

    return perplexity_shown(entry["perplexity"], mean_loss(entry.get("loss_forward"), entry.get("loss_backward")))


def copy_model(src: Path, dst: Path) -> None:
    """Copy a model's files (not its checkpoint or data cache) atomically."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in MODEL_FILES:
        shutil.copy2(src / name, tmp / name)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.replace(dst)


# -- conversion ----------------------------------------------------------------------------


def convert(args, state: dict, heldout: Path) -> dict:
    """WORK/best -> ``--out`` as float16 safetensors with the softmax and vocab; returns the
    converted model's held-out perplexities."""
    import torch

    from spacy_elmo.training.evaluate import evaluate_model_dir, perplexity_text
    from spacy_elmo.training.modelio import load_pretrained

    best = args.work_dir / "best"
    if not (best / "config.json").exists():
        raise SystemExit(f"no trained model in {best}: run this script without --convert-only first")
    out = args.out.resolve()
    if (out / "config.json").exists() and not args.force:
        raise SystemExit(f"{out} already holds a model: pass --force to replace it")
    bilm, softmax, vocab, provenance = load_pretrained(best, backend="reference")
    if softmax is None or vocab is None:
        raise SystemExit(f"{best} has no softmax / vocab.txt: it was not written by `spacy_elmo pretrain`")
    provenance = dict(provenance, recipe="benchmarks/train_default.py", run_options=state["run"],
                      best_step=state["best"]["step"], heldout_float32=state["best"], chunks=state["chunks"],
                      # None: paused by the person running it while still improving, not by the recipe
                      stopped=state["stopped"] or "paused while held-out perplexity was still improving",
                      corpus_manifest=_manifest(Path(state["run"]["train_text"]).parent))
    init = state["run"].get("init")
    if init and (Path(init) / "config.json").exists():  # stage 2: keep stage 1's record too
        provenance["init_provenance"] = json.loads((Path(init) / "config.json").read_text(encoding="utf-8")).get("provenance")
    out.mkdir(parents=True, exist_ok=True)
    vocab.save(out)
    bilm.save(out, extra_tensors={"softmax.weight": softmax.weight.detach(), "softmax.bias": softmax.bias.detach()},
              dtype=torch.float16, provenance=provenance)
    print(f"\nwrote the float16 model to {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)", flush=True)
    results = {}
    for mode, per_sentence in (("stream", False), ("per_sentence", True)):
        result = results[mode] = evaluate_model_dir(str(out), heldout, device=args.device, progress=True,
                                                    per_sentence=per_sentence)
        print(f"held-out {perplexity_text(result)} of the converted model "
              f"({result['n_tokens']:,} tokens, OOV {result['oov_rate']:.2%}, vocabulary {result['vocab_size']:,})", flush=True)
    write_json(args.work_dir / "heldout_float16.json", results)
    return results


def _manifest(corpus: Path) -> dict | None:
    """The corpus manifest's totals and package versions, when the corpus has one."""
    path = corpus / "manifest.json"
    if not path.exists():
        return None
    m = json.loads(path.read_text(encoding="utf-8"))
    return {k: m[k] for k in ("command", "totals", "sources") if k in m} or {"file": str(path)}


def main(argv=None) -> int:
    args = parse_args(argv)
    train, heldout = corpus_files(args)
    run = {k: getattr(args, k) for k in RUN_KEYS}
    run.update(preset=None if args.options else args.preset, options=str(args.options.resolve()) if args.options else None,
               train_text=str(train), heldout_text=str(heldout))
    if args.init or args.sentences:  # only when set: stream runs recorded before these options still resume
        run.update(init=str(args.init.resolve()) if args.init else None, sentences=args.max_length if args.sentences else None)
        if args.init:
            run.update(preset=None, options=None)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    state = load_state(args, run)
    print(f"work dir {args.work_dir}; device {args.device}; {len(state['chunks'])} chunk(s) done", flush=True)
    if not args.convert_only:
        train_loop(args, state, train, heldout)
    if args.no_convert or (state["stopped"] is None and not args.convert_only):
        print("not converting yet (training has not stopped; --convert-only converts the best model so far)")
        return 0
    convert(args, state, heldout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
