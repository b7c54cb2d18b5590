"""``spacy-elmo pretrain``: train (or fine-tune) a biLM on your corpus, bilm-tf style."""

import os
import shlex
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperOption

from ..bilm import BiLMConfig
from ..bilm.config import InvalidConfigValue, UnknownConfigFields, is_hdf5, read_options_bytes
from ..errors import Errors, Warnings, counted
from ..ops import resolve_backend
from ..paths import files_listed, missing_path_error, read_json_file
from ..ranks import Ranks, machine_processes, torchrun_ranks
from ..training.data import AUTO_RULE
from ..training.jobstore import STORE_WAIT_S, ask_job_store, job_key
from ..training.trainer import BOUNDS, DEFAULT_EPOCHS, OPTIMIZERS, leave_failed_run, said_by_this_rank
from .app import (COMMAND_LINE, DEVICE_HELP, app, checked_by, fail, given_output_path, given_path, given_text,
                  known_device, model_name, non_negative_int, one_of, positive_int, progress_option, spacy_language, warn)
from .signals import Stop, signals_stop


def _bounded(name: str):
    """An option callback for TrainConfig field ``name``: a usage error naming the option unless
    the bound TrainConfig.validate checks (``trainer.BOUNDS``) accepts the value."""
    accepts, what = BOUNDS[name]

    def check(value):
        if not accepts(value):
            raise typer.BadParameter(Errors.E_BAD_OPTION_VALUE.format(what=what, value=value))
        return value

    return check


def model_config(preset: Optional[str], options: Optional[Path]) -> dict:
    """A BiLMConfig dict from ``--preset`` or ``--options``: an AllenNLP options.json, a JSON object of BiLMConfig
    fields, a spacy-elmo model's ``config.json`` (its ``config``), or a model directory holding one of the files."""
    from ..bilm.native_io import CONFIG_NAME, FORMAT, OPTIONS_GLOB, dirs_named_like, read_config_json

    if preset and options:
        raise typer.BadParameter(Errors.E_PRESET_AND_OPTIONS)
    if options is None:
        return BiLMConfig.preset(preset or "small").to_dict()  # --preset's callback checked the name
    if not Path(options).exists():  # a quoted ~ is the likely cause, and the error says so
        raise typer.BadParameter(str(missing_path_error(options, Errors.E_OPTIONS_MISSING.format(path=options),
                                                            what=Errors.E_LINK_TO_OPTIONS)), param_hint="'--options'")
    path = Path(options)
    try:
        if path.is_dir():  # a model directory (pretrain's OUTPUT_DIR, BiLM.save's, AllenNLP files): its options
            # no directory named like one (old_options.json/): neither counted (a real options.json beside it was
            # refused as "2 found") nor read (E_OPTIONS_IS_DIR's BiLM.load advice). A dangling link (an annex file
            # not fetched) is counted: its read names the missing file, not "0 found"
            config_file = path / CONFIG_NAME  # a dangling config.json too: its read says so, not "0 found"
            found = ([config_file] if config_file.is_file() or (config_file.is_symlink() and not config_file.exists())
                     else sorted(p for p in path.glob(OPTIONS_GLOB) if not p.is_dir()))
            if len(found) != 1:
                names = f": {files_listed(found)}" if found else ""  # which ones, a dangling link marked
                raise typer.BadParameter(Errors.E_OPTIONS_DIR.format(
                    path=path, n_options=len(found), config=CONFIG_NAME, names=names,
                    dirs=dirs_named_like(path, CONFIG_NAME, OPTIONS_GLOB)), param_hint="'--options'")
            path = found[0]
        try:
            raw = read_options_bytes(path)  # unreadable: said so (a directory was taken above, globbed files alone)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--options'") from err
        except FileNotFoundError as err:  # a dangling link (an annex file not fetched), a loop: the link named
            raise typer.BadParameter(str(missing_path_error(path, Errors.E_OPTIONS_MISSING.format(path=path))),
                                     param_hint="'--options'") from err
        if is_hdf5(raw):  # a weight file: "'utf-8' codec can't decode byte 0x89" named neither the file nor the fix
            raise typer.BadParameter(Errors.E_PRETRAIN_OPTIONS_IS_HDF5.format(path=path), param_hint="'--options'")
        # said in E_OPTIONS_FILE below; no object: a list's items (a string's characters) were read as unknown keys
        data = read_json_file(path, "{error}", Errors.E_JSON_NOT_OBJECT, raw=raw)
        section = ""  # where the BiLMConfig fields are in the file: its top level, or a model config.json's "config"
        if isinstance(data, dict) and data.get("format") == FORMAT:  # a spacy-elmo model's config.json: its sizes
            data, section = read_config_json(path)["config"], "config."
        if isinstance(data, dict) and "lstm" in data:
            # its own errors name the file, the key and the fix: not wrapped in another "could not read"
            try:
                config = BiLMConfig.from_allennlp_options(data, source=str(path))
            except ValueError as err:
                raise typer.BadParameter(str(err), param_hint="'--options'") from err
        else:
            try:
                config = BiLMConfig.from_dict(data)
            except InvalidConfigValue as err:  # the file is of a kind --options takes: its value is to fix
                if err.together or err.alone:  # "Fix projection_dim" after two or three named said otherwise
                    said = Errors.E_OPTIONS_FILE_BAD_VALUES if err.together else Errors.E_OPTIONS_FILE_BAD_VALUES_EACH
                    raise typer.BadParameter(said.format(
                        path=path, keys=", ".join(section + name for name in err.together or err.alone), error=err),
                        param_hint="'--options'") from err
                raise typer.BadParameter(Errors.E_OPTIONS_FILE_BAD_VALUE.format(
                    path=path, key=section + err.field, error=err), param_hint="'--options'") from err
    except UnknownConfigFields as err:  # its own words name from_dict and from_allennlp_options, the Python API's
        raise typer.BadParameter(Errors.E_OPTIONS_UNKNOWN_FIELD.format(path=path, names=err.names, choices=err.choices),
                                 param_hint="'--options'") from err
    except OSError as err:  # no read permission, an I/O error: the file meant, not one to replace ("Pass an ...")
        raise typer.BadParameter(Errors.E_OPTIONS_UNREADABLE.format(path=path, error=err),
                                 param_hint="'--options'") from err
    # read_json_file says JSON nested past Python's recursion limit as a ValueError. A message's own full stop is the
    # sentence's: not ".."
    except (ValueError, TypeError) as err:
        raise typer.BadParameter(Errors.E_OPTIONS_FILE.format(path=path, error=str(err).rstrip(".")),
                                 param_hint="'--options'") from err
    return config.to_dict()


#: The key of the job's store that counts the ranks a signal stopped (:func:`~spacy_elmo.training.jobstore.job_key`:
#: an elastic restart of the job counts afresh in the same store).
_STOPPED = "stopped"


def _first_to_stop(ranks: Ranks) -> bool:
    """Whether this process is the first of its torchrun job that a signal stopped (one process: True).

    Ctrl-C or SIGTERM reaches every rank (torchrun passes its signal on; Slurm signals every task), or one
    alone (a ``kill`` of one PID): the first rank to count itself in torchrun's store says how to go on, once
    either way. Without that store (a signal before the process group started, or ranks started otherwise, whose
    store rank 0 holds and takes along when it ends), or with no answer from it in :data:`STORE_WAIT_S`: rank 0."""
    rank, world, _ = ranks
    if world == 1:
        return True
    key = job_key(_STOPPED)
    count = ask_job_store(lambda store: store.add(key, 1), STORE_WAIT_S)
    return count == 1 if count is not None else rank == 0


def _by_rank(message: str, ranks: Ranks) -> str:
    """``message`` as rank ``ranks.rank`` says it: a rank other than 0 of a torchrun job prefixes its rank (torchrun
    merges every rank's output: an error of one rank's own, an I/O error or CUDA out of memory, named no rank), unless
    the message begins with it."""
    if ranks.world == 1 or ranks.rank == 0 or message.startswith(f"Rank {ranks.rank} of this torchrun job"):
        return message
    return Errors.E_SAID_BY_RANK.format(rank=ranks.rank, message=message)


def _report_end(err: BaseException, stop: Stop, output_dir: Path, ranks: Ranks) -> None:
    """Say why the run ended (an error, or the signal that stopped it, and how to go on) and exit: 1 for an
    error, 128 + the signal for a signal (130 Ctrl-C, 143 SIGTERM). Under torchrun, what every rank meets
    alike is said once: an error by rank 0, a stop by the first rank it reached, and a rank whose peer failed
    or refused the run (rank 0's check of OUTPUT_DIR) exits 1 quietly, as that peer says why. A rank that
    merely lost its stopped peer (gloo's or NCCL's error) says that error and exits 1."""
    if stop.signum is None and not isinstance(err, KeyboardInterrupt):
        try:
            if said_by_this_rank(err, ranks.rank):
                fail(_by_rank(str(err), ranks))
            raise typer.Exit(1) from err
        finally:  # said: every rank may exit
            leave_failed_run(err)
            if ranks.world > 1:
                stop.ignore_signals()
    # A signal (also one that came while this rank met its stopped peer's error): say what the directory holds
    from ..training.checkpoint import checkpoint_path

    signum = stop.signal_of(err)
    if _first_to_stop(ranks):
        message = Errors.E_PRETRAIN_INTERRUPTED if checkpoint_path(output_dir).exists() else Errors.E_PRETRAIN_INTERRUPTED_EARLY
        warn(message.format(path=output_dir))
    stop.exit(signum, err)


def _trained(steps: int, resumed_from: int) -> str:
    """How far the run trained: ``trained 8 steps``, or resumed from step 6, ``trained to step 8 (2 steps this run)``
    (it said "trained 8 steps", as if this run had made them all)."""
    if not resumed_from:
        return f"trained {counted(steps, 'step')}"
    return f"trained to step {steps:,} ({counted(steps - resumed_from, 'step')} this run)"


@app.command()
def pretrain(
    ctx: typer.Context,
    train_path: Path = typer.Argument(..., path_type=str, callback=given_path, help="A UTF-8 text file (plain, .gz, .bz2 or .xz), or a directory of them."),
    output_dir: Path = typer.Argument(..., path_type=str, callback=given_output_path, help="Where the model, vocab.txt, checkpoint and log go."),
    heldout: Optional[Path] = typer.Option(None, path_type=str, callback=given_path, help="Held-out text: full-softmax perplexity at every checkpoint (with an --init that has a softmax also before the first step: step 0)."),
    lang: str = typer.Option("en", callback=spacy_language, help="spaCy language of the tokenizer (the pipeline's tokens)."),
    tokenizer: Optional[Path] = typer.Option(
        None, path_type=str, callback=given_path,
        help="A spaCy config file (.cfg) whose tokenizer block (section nlp.tokenizer) reads the corpus and --heldout instead of "
        "spacy.blank(--lang)'s tokenizer (e.g. Chinese words: @tokenizers = \"spacy.zh.ChineseTokenizer\", segmenter = "
        "\"jieba\", jieba installed); the model records it, and embed, evaluate, fit-state and the elmo component read "
        "or check with it. Its nlp.lang, if set, must be --lang."),
    preset: Optional[str] = typer.Option(None, callback=checked_by(BiLMConfig.preset), help="Model size: small, medium or original (default small)."),
    options: Optional[Path] = typer.Option(
        None, path_type=str, callback=given_path, help="Model sizes: an AllenNLP options.json, a JSON object of BiLMConfig fields, or a spacy-elmo model's "
        "config.json or directory (its sizes only, trained from the start: --init fine-tunes the model itself)."),
    init: Optional[str] = typer.Option(None, parser=given_text, callback=model_name, help="Fine-tune this model (native dir, AllenNLP dir or 'default')."),
    new_vocab: bool = typer.Option(False, help="With --init: vocabulary from this corpus (known words keep their softmax rows)."),
    vocab_size: int = typer.Option(
        100_000, callback=_bounded("vocab_size"), help="Largest vocabulary (with <S>, </S>, <UNK>); 0: no cap. Unused with --init of a model with a "
        "softmax, unless --new-vocab."),
    min_count: int = typer.Option(1, callback=positive_int, help="Smallest count of a vocabulary word (as --vocab-size with --init)."),
    max_steps: Optional[int] = typer.Option(None, callback=positive_int, help="Stop after this many steps."),
    epochs: Optional[float] = typer.Option(None, callback=_bounded("epochs"), help=f"Stop after this many epochs (default {DEFAULT_EPOCHS})."),
    batch_size: int = typer.Option(128, callback=positive_int, help="Rows per process (bilm-tf: 128)."),
    unroll: int = typer.Option(
        20, callback=positive_int, help="Truncated-BPTT window (bilm-tf: 20); streams only (another value is an error with --sentences)."),
    sentences: bool = typer.Option(
        False, "--sentences",
        help="Rows are whole sentences read from the start state, as the elmo component reads them, instead of "
        "bilm-tf's continuous streams with carried states (held-out perplexity per sentence; --unroll and "
        "--state-sentences, set to anything but their defaults, are then errors)."),
    max_length: int = typer.Option(
        100, callback=positive_int, help="With --sentences (another value is an error without): longer sentences are cut into pieces of "
        "this many targets."),
    length_pool: Optional[int] = typer.Option(
        None, callback=positive_int,
        help="With --sentences (an error without): sort the sentences by length within pools of this many batches "
        "before cutting them into batches. 1 (the default of a new run): random batches of mixed lengths; larger "
        "pads less (faster) but gives every batch one narrow band of lengths, and steps on short sentences can "
        "make the model worse. With --resume: the checkpoint's (50 for runs from before this option); another "
        "value is refused."),
    negatives: int = typer.Option(8192, callback=positive_int, help="Sampled-softmax negatives per batch (bilm-tf: 8192)."),
    optimizer: str = typer.Option("adagrad", callback=one_of(OPTIMIZERS, Errors.E_UNKNOWN_OPTIMIZER), help="adagrad (bilm-tf, lr 0.2, accumulator 1.0) or adam."),
    lr: Optional[float] = typer.Option(None, callback=_bounded("lr"), help="Learning rate (default: 0.2 adagrad, 1e-3 adam)."),
    dropout: float = typer.Option(0.1, callback=_bounded("dropout"), help="Dropout on LSTM layer inputs and the top output."),
    clip: float = typer.Option(10.0, callback=_bounded("clip"), help="Global gradient-norm clip."),
    seed: int = typer.Option(0, callback=non_negative_int, help="Random seed (data order, init, sampling, dropout)."),
    resume: bool = typer.Option(False, help="Continue the run in OUTPUT_DIR from its checkpoint, exactly."),
    device: str = typer.Option("cpu", callback=known_device, help=f"{DEVICE_HELP} CUDA trains with bf16 autocast."),
    backend: str = typer.Option("auto", callback=checked_by(resolve_backend, (ValueError, RuntimeError)),
                                help="Kernels: auto, fused or reference (fused needs the compiled kernels)."),
    checkpoint_every: int = typer.Option(1000, callback=positive_int, help="Checkpoint (and save the model) every N steps."),
    state_sentences: int = typer.Option(
        0, callback=non_negative_int, help="Fit the saved model's initial state (where every sentence starts) on this many training "
        "sentences (e.g. 2048); 0: zeros, as the references. Streams only (an error with --sentences). See "
        "docs/default-model.md (in the source distribution) before turning it on."),
    log_every: int = typer.Option(10, callback=positive_int, help="Write a log line every N steps and at each checkpoint; its sampled perplexity and tok/s cover the steps since the line before."),
    threads: Optional[int] = typer.Option(None, callback=positive_int, help="torch CPU threads, at least 1 (default: torch's own choice)."),
    tokenize_processes: int = typer.Option(
        0, callback=_bounded("tokenize_processes"),
        help=f"Processes that tokenize the corpus (the cache is the same whatever their number); {AUTO_RULE}."),
    prefetch: Optional[bool] = typer.Option(
        None, "--prefetch/--no-prefetch",
        help="Prepare each step's inputs (char encoding, targets, the sampler's draw) on a background thread while the "
        "step before runs; the same losses either way (default: on with CUDA, off on the CPU)."),
    progress: bool = progress_option(),
    keep_freed_memory: bool = typer.Option(
        True, "--keep-freed-memory/--return-freed-memory",
        help="glibc: keep freed memory for reuse instead of unmapping it (every step reallocates the same large "
        "buffers; see spacy_elmo/training/malloc.py). The process then holds its peak heap until it exits."),
) -> None:
    """Pretrain an ELMo biLM (sampled softmax, both directions, bilm-tf defaults).

    Run under `torchrun --nproc-per-node N` for DistributedDataParallel.
    """
    from ..training.evaluate import perplexity_text
    from ..training.malloc import keep_freed_memory as keep_freed
    from ..training.trainer import TrainConfig, train

    try:  # once: reporting the end must not meet a malformed environment again
        ranks = torchrun_ranks()
    except ValueError as err:  # WORLD_SIZE, RANK or LOCAL_RANK set to no rank of a job
        fail(str(err))
    config = model_config(preset, options) if (preset or options) else None
    block = None
    if tokenizer is not None:  # read and built now: a usage error before anything else is read or written
        from ..training.data import read_tokenizer_config

        try:
            block = read_tokenizer_config(tokenizer, lang)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--tokenizer'") from err
    cfg = TrainConfig(
        train_path=str(train_path), output_dir=str(output_dir), heldout=str(heldout) if heldout else None, lang=lang,
        tokenizer=block,
        vocab_size=vocab_size, min_count=min_count, max_steps=max_steps, epochs=epochs, batch_size=batch_size,
        unroll=unroll, negatives=negatives, optimizer=optimizer, lr=lr, dropout=dropout, clip=clip, seed=seed,
        resume=resume, device=device, backend=backend, init=init, new_vocab=new_vocab, model=config,
        checkpoint_every=checkpoint_every, state_sentences=state_sentences, sentences=sentences, max_length=max_length, length_pool=length_pool, log_every=log_every, threads=threads,
        tokenize_processes=tokenize_processes, progress=progress, prefetch=prefetch,
    )
    try:  # options that do not go together (--max-steps with --epochs, --unroll with --sentences, --init with
        cfg.validate()  # --preset): a usage error, as an option's value is, not a failed run
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    if keep_freed_memory:
        keep_freed()
    with signals_stop(command_line=ctx.obj == COMMAND_LINE) as stop:
        try:
            summary = train(cfg, on_step=stop.check)
        # OSError: also a disk full, a path under a file...; KeyboardInterrupt: Ctrl-C, or SIGTERM (Terminated)
        except (ValueError, OSError, RuntimeError, KeyboardInterrupt) as err:
            stop.reporting = True  # first: a signal now must not escape this handler
            _report_end(err, stop, output_dir, ranks)
    if summary.get("rank", 0) != 0:  # under torchrun: rank 0 wrote the model and reports it
        return
    stats = summary["corpus"]
    typer.echo(
        f"{_trained(summary['steps'], summary['resumed_from'])}; corpus {counted(stats['n_tokens'], 'token')} in "
        f"{counted(stats['n_sentences'], 'sentence')} from {counted(stats['n_files'], 'file')} ({stats['n_binary']:,} "
        f"skipped as binary, UTF-16/32 or a format not read, {counted(stats['replaced_bytes'], 'undecodable byte')} replaced); vocabulary {summary['vocab_size']:,}"
    )
    if summary.get("heldout"):
        h = summary["heldout"]
        typer.echo(f"held-out {perplexity_text(h)}; OOV rate {h['oov_rate']:.2%} (<UNK> targets count)")
    done = "written to" if summary["model_written"] else "left as it was in"
    typer.echo(f"model {done} {summary['output_dir']} (load with BiLM.load)")
    if not sentences:  # a stream model reads a sentence alone, as the elmo component does, badly: say the next stage
        typer.echo(f"for the spaCy elmo component, which reads every sentence alone, go on with whole sentences "
                   f"({DEFAULT_EPOCHS} epochs unless you add --max-steps or --epochs): "
                   f"{sentence_stage(ctx, train_path, output_dir, ranks)}")
        if RENDEZVOUS_PLACEHOLDER in launcher(ranks):
            warn(Warnings.W_STAGE_RENDEZVOUS.format(placeholder=RENDEZVOUS_PLACEHOLDER))


#: pretrain's options that the sentence stage takes from the stream run when given another value than their default:
#: the text it measures and tokenizes, how it trains (bilm-tf's settings, which the bundled model's stage 2 kept) and
#: where and how it runs.
STAGE_CARRIES = ("heldout", "lang", "tokenizer", "batch_size", "negatives", "optimizer", "lr", "dropout", "clip", "seed", "device",
                 "backend", "checkpoint_every", "log_every", "threads", "tokenize_processes", "prefetch", "progress",
                 "keep_freed_memory")
#: and those it does not: its own arguments and length (an epoch of streams is not a step count of sentences), the
#: model and vocabulary, which come with --init (--preset and --options are errors with it, --vocab-size and
#: --min-count unused), the stream-only options (errors with --sentences) and the sentence-only ones (errors without,
#: so at their defaults here), and --resume (a new run).
STAGE_LEAVES = ("train_path", "output_dir", "max_steps", "epochs", "preset", "options", "init", "new_vocab", "vocab_size",
                "min_count", "unroll", "state_sentences", "sentences", "max_length", "length_pool", "resume")


def launcher(ranks: Ranks) -> List[str]:
    """The words that start ``pretrain`` as this run was started: ``spacy-elmo`` for one process; under torchrun
    (``ranks.world`` > 1) ``torchrun --nproc-per-node N -m spacy_elmo``, N the processes of this machine
    (torchrun's ``LOCAL_WORLD_SIZE``; without it, or with a value that does not divide the world, every
    process), with ``--nnodes M`` and a rendezvous that joins the M machines (:func:`rendezvous`: its endpoint a
    placeholder for the user's) when the job spans M machines. A second stage started as plain ``spacy-elmo`` would train on one process, and one
    started with ``--nnodes`` alone as M single-machine jobs of their own (torchrun's default rendezvous is
    local): every machine would train and write the model by itself."""
    if ranks.world == 1:
        return ["spacy-elmo"]
    local = machine_processes(ranks)
    nodes = ["--nnodes", str(ranks.world // local), *rendezvous()] if local < ranks.world else []
    return ["torchrun", *nodes, "--nproc-per-node", str(local), "-m", "spacy_elmo"]


#: :func:`rendezvous`'s endpoint, for the user to replace with the one the run was started with (torchrun does not
#: tell its workers its ``--rdzv-endpoint``: see :func:`rendezvous`).
RENDEZVOUS_PLACEHOLDER = "HOST:PORT"


def rendezvous() -> List[str]:
    """torchrun's options that join a new job's machines with a c10d rendezvous, the same command on every machine
    (no ``--node-rank``): ``--rdzv-endpoint`` :data:`RENDEZVOUS_PLACEHOLDER`, and this job's ``--rdzv-id``
    (``TORCHELASTIC_RUN_ID``) unless torchrun's default. The endpoint is a placeholder because torchrun gives its
    workers none: their ``MASTER_ADDR:MASTER_PORT`` is a store that the first machine's agent opened on a free port
    for this job (with c10d; the ``--master-port`` only with a static rendezvous), not the ``--rdzv-endpoint`` the
    machines met at, and ``PET_RDZV_ENDPOINT`` is set only where the user set it (a command-line
    ``--rdzv-endpoint`` overrides it unseen)."""
    words = ["--rdzv-backend", "c10d", "--rdzv-endpoint", RENDEZVOUS_PLACEHOLDER]
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":  # "none": torchrun's default, which it also sets
        words += ["--rdzv-id", run_id]
    return words


def sentence_stage(ctx: typer.Context, train_path: Path, output_dir: Path, ranks: Ranks = Ranks(0, 1, 0)) -> str:
    """The ``pretrain --sentences --init`` command that goes on from the stream model in ``output_dir`` (the
    recipe's second stage: the bundled model's per-sentence perplexity went from 1,632.65 to 232.25), into a
    directory beside it, with the run's options of ``STAGE_CARRIES`` (``ctx.params``) that differ from their
    defaults, written as the command line takes them, started as this run of ``ranks`` was (:func:`launcher`:
    under torchrun ``torchrun --nproc-per-node N -m spacy_elmo pretrain ...``)."""
    beside = output_dir.parent / f"{output_dir.name or 'model'}-sentences"
    words = [*launcher(ranks), "pretrain", str(train_path), str(beside), "--init", str(output_dir), "--sentences"]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name not in STAGE_CARRIES or not isinstance(param, TyperOption) or value == param.default:
            continue
        if param.is_flag:  # --prefetch/--no-prefetch: the name that sets the value
            words.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            words += [param.opts[0], str(value)]
    return " ".join(shlex.quote(word) for word in words)
