"""The pretrain / evaluate / export commands, end to end on a tiny model."""

import json
import re
import warnings

import pytest
import torch
import typer

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.cli import app
from spacy_elmo.errors import Warnings
from spacy_elmo.training.trainer import read_log
from tests.cli_text import mixed_runner as runner, plain

from .conftest import TINY, tiny_pretrain_args, write_corpus



def pretrain_tiny(tmp_path, *extra, max_steps=3):
    """Pretrain the tiny model for 3 steps: ``(result, train, held, options, out)``."""
    out = tmp_path / "model"
    args, train, options = tiny_pretrain_args(tmp_path, out, *extra, max_steps=max_steps)
    held = write_corpus(tmp_path / "held.txt", 30, seed=2)
    return runner.invoke(app, args), train, held, options, out


def test_pretrain_evaluate_export(tmp_path):
    # --progress (after the helper's --no-progress): the held-out line printed at each evaluation comes with the bars
    result, train, held, options, out = pretrain_tiny(tmp_path, "--heldout", str(tmp_path / "held.txt"), "--progress")
    assert result.exit_code == 0, result.output
    assert "held-out perplexity" in result.output
    assert "trained 3 steps; corpus " in result.output
    assert " sentences from 1 file (0 skipped as binary, UTF-16/32 or a format not read, " in result.output
    assert f"model written to {out} (load with BiLM.load)" in result.output
    (event,) = [e for e in read_log(out) if e.get("event") == "heldout"]
    # <UNK> targets count in the perplexity (bilm-tf): a small vocabulary's low perplexity is read with its OOV rate
    # the held-out text (30 sentences) is read as a stream cut into up to eval_batch_size (32, pretrain's) rows: said so,
    # not "one stream"; and the value is printed when measured, not only on the evaluation's bar
    assert 1 < event["n_rows"] <= 32
    assert f"OOV rate {event['oov_rate']:.2%}" in result.stdout and f"perplexity (stream in {event['n_rows']} rows)" in result.stdout
    assert f"step 3: held-out perplexity (stream in {event['n_rows']} rows): forward {event['perplexity_forward']:.2f}" in result.stderr
    assert event["replaced_bytes"] == 0 and event["perplexity"] > 1
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--options", str(options)])
    assert result.exit_code == 1 and "--resume" in result.output
    # a resume that trains nothing leaves the model: the last line said "model written" under the warning
    with pytest.warns(RuntimeWarning, match="nothing was trained"):
        result = runner.invoke(app, [*tiny_pretrain_args(tmp_path, out, max_steps=3)[0], "--resume"])
    assert result.exit_code == 0, result.output
    assert "trained to step 3 (0 steps this run)" in result.output
    assert f"model left as it was in {out} (load with BiLM.load)" in result.output and "written" not in result.output

    result = runner.invoke(app, ["evaluate", str(out), str(held), "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output.strip().splitlines()[-1])
    assert {"perplexity", "perplexity_forward", "perplexity_backward", "oov_rate"} <= set(metrics)
    assert metrics["mode"] == "stream"  # the way a stream-trained model was trained

    for fmt in ("allennlp", "native"):
        dest = tmp_path / fmt
        result = runner.invoke(app, ["export", str(out), str(dest), "--format", fmt])
        assert result.exit_code == 0, result.output
        BiLM.load(dest)
        again = runner.invoke(app, ["evaluate", str(dest), str(held), "--json"])
        assert abs(json.loads(again.output.strip().splitlines()[-1])["perplexity"] - metrics["perplexity"]) < 1e-3

    result = runner.invoke(app, ["pretrain", str(tmp_path / "nope.txt"), str(tmp_path / "x"), "--options", str(options)])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_a_fine_tuning_run_prints_the_init_models_heldout_perplexity_before_training(tmp_path):
    """`pretrain --init MODEL --heldout HELD` prints the held-out perplexity of MODEL before its first step, on the
    line each checkpoint's evaluation prints (labelled step 0, before training); a run from scratch prints none."""
    result, train, held, options, base = pretrain_tiny(tmp_path, "--heldout", str(tmp_path / "held.txt"), "--progress",
                                                       max_steps=1)
    assert result.exit_code == 0, result.output
    assert "step 1: held-out perplexity" in result.stderr and "step 0" not in result.stderr
    tuned = tmp_path / "tuned"
    args = ["pretrain", str(train), str(tuned), "--init", str(base), "--max-steps", "1", "--batch-size", "4", "--unroll", "5",
            "--negatives", "8", "--threads", "1", "--backend", "reference", "--heldout", str(held), "--progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    first = [e for e in read_log(tuned) if e.get("event") == "heldout"][0]
    assert first["step"] == 0
    assert (f"step 0 (before training): held-out perplexity (stream in {first['n_rows']} rows): "
            f"forward {first['perplexity_forward']:.2f}") in result.stderr
    assert "step 1: held-out perplexity" in result.stderr


def test_evaluate_says_how_many_rows_it_read(tmp_path):
    """`evaluate --stream` said "perplexity (one stream)" also at --batch-size 32, where it cuts the text into
    up to 32 rows read from the zero state: the line says the rows, as n_rows in the JSON."""
    result, _, held, _, out = pretrain_tiny(tmp_path)
    assert result.exit_code == 0, result.output
    seen = {}
    for flags in (["--stream", "--batch-size", "1"], ["--stream", "--batch-size", "4"], ["--per-sentence"]):
        as_json = runner.invoke(app, ["evaluate", str(out), str(held), "--json", *flags])
        text = runner.invoke(app, ["evaluate", str(out), str(held), *flags])
        assert as_json.exit_code == text.exit_code == 0, (as_json.output, text.output)
        seen[flags[-1]] = (json.loads(as_json.stdout.strip().splitlines()[-1]), text.stdout)
    (one, one_text), (four, four_text), (alone, alone_text) = seen.values()
    assert one["n_rows"] == 1 and "perplexity (one stream): forward" in one_text
    assert f"geometric mean {one['perplexity']:.2f}" in one_text  # exp of the mean loss, not the mean perplexity
    assert 1 < four["n_rows"] <= 4 and f"perplexity (stream in {four['n_rows']} rows): forward" in four_text
    assert "one stream" not in four_text
    assert alone["n_rows"] == alone["n_sentences"] == 30 and "perplexity (every sentence alone): forward" in alone_text


def test_fit_state_reads_at_most_4096_sentences_by_default(tmp_path, monkeypatch):
    """fit-state's --max-sentences default, 4096 (what its --help says), was pinned by no test: it is the limit the
    text is read with, and --max-sentences sets it."""
    from spacy_elmo.training import data

    model = tmp_path / "model"
    BiLM(BiLMConfig(**TINY)).save(model)
    text = write_corpus(tmp_path / "text.txt", 20)
    limits = []
    tokenize_file = data.tokenize_file

    def recording(*args, limit=None, **kwargs):
        limits.append(limit)
        return tokenize_file(*args, limit=limit, **kwargs)

    monkeypatch.setattr(data, "tokenize_file", recording)  # fit-state imports it from the module when it runs
    for extra, limit in [([], 4096), (["--max-sentences", "12"], 12)]:
        result = runner.invoke(app, ["fit-state", str(model), str(text), "--rows", "4", "--no-progress", *extra])
        assert result.exit_code == 0, result.output
        assert limits.pop() == limit and not limits


def test_fit_state_and_per_sentence_evaluate(tmp_path):
    result, train, held, _, out = pretrain_tiny(tmp_path)
    assert result.exit_code == 0, result.output
    assert BiLM.load(out).initial_state is None  # opt-in

    def per_sentence():
        result = runner.invoke(app, ["evaluate", str(out), str(held), "--per-sentence", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output.strip().splitlines()[-1])

    zero = per_sentence()
    result = runner.invoke(app, ["fit-state", str(out), str(train), "--rows", "4"])
    assert result.exit_code == 0, result.output
    assert BiLM.load(out).initial_state is not None
    fitted = per_sentence()
    assert zero["mode"] == fitted["mode"] == "per_sentence"
    assert fitted["perplexity"] != zero["perplexity"]  # the state is what the evaluation starts from
    allen = tmp_path / "allen"
    with pytest.warns(UserWarning, match=re.escape(f"{allen / 'weights.hdf5'} starts from zeros")):
        result = runner.invoke(app, ["export", str(out), str(allen), "--format", "allennlp"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["fit-state", str(out), "--clear"])
    assert result.exit_code == 0 and BiLM.load(out).initial_state is None
    assert f"cleared the initial state of {out}" in result.stdout
    assert per_sentence()["perplexity"] == zero["perplexity"]
    # Clearing again: nothing to clear, said so (it said "cleared"), and exit 0.
    result = runner.invoke(app, ["fit-state", str(out), "--clear"])
    assert result.exit_code == 0, result.output
    assert "cleared" not in result.stdout
    assert plain(result.stderr) == plain(Warnings.W_FIT_STATE_NOTHING_TO_CLEAR.format(model=out))
    # Too little text: a clear error, nothing written.
    short = tmp_path / "short.txt"
    short.write_text("One sentence only .\n", encoding="utf-8")
    result = runner.invoke(app, ["fit-state", str(out), str(short)])
    assert result.exit_code == 1 and "holds 1 non-empty sentence(s), fewer than the 96 --rows 32 needs" in plain(result.output)
    assert BiLM.load(out).initial_state is None
    result = runner.invoke(app, ["fit-state", str(out)])
    assert result.exit_code == 2 and "Pass TEXT_PATH" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["pretrain", "evaluate", "embed"])
def test_cuda_asked_for_without_cuda_is_a_clear_error(tmp_path, command):
    text = write_corpus(tmp_path / "text.txt", 20)
    args = {"pretrain": ["pretrain", str(text), str(tmp_path / "out")],
            "evaluate": ["evaluate", "default", str(text)],
            "embed": ["embed", str(text), str(tmp_path / "out.h5")]}[command]
    result = runner.invoke(app, [*args, "--device", "cuda"])
    assert result.exit_code == 2, result.output  # a usage error, as every other bad option (was 1)
    assert ("Invalid value for '--device': --device cuda was requested but CUDA is not available. Use --device cpu."
            in plain(result.output))
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("command", ["pretrain", "evaluate", "embed"])
def test_a_gpu_index_that_is_not_there_is_a_usage_error(tmp_path, monkeypatch, command):
    """--device cuda:99 passed every check (torch.device parses it, CUDA is there) and failed only when
    the model was moved there, after the corpus had been read; now a usage error naming the option."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    from spacy_elmo.device import torch_device

    assert torch_device("cuda:1") == torch.device("cuda", 1)  # the last GPU there is accepted
    args = {"pretrain": ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out")],
            "evaluate": ["evaluate", str(tmp_path / "no-model"), str(tmp_path / "no-text")],
            "embed": ["embed", str(tmp_path / "no-text"), str(tmp_path / "out")]}[command]
    result = runner.invoke(app, [*args, "--device", "cuda:2"])
    assert result.exit_code == 2, result.output
    assert ("Invalid value for '--device': --device cuda:2 was requested but 2 CUDA device(s) are visible: use an "
            "index from 0 to 1, or --device cuda (the current one)." in plain(result.output))
    assert not (tmp_path / "out").exists()


def test_fit_state_on_a_sentences_model_warns_that_it_replaces_the_start_it_learnt(tmp_path):
    """pretrain refuses --state-sentences with --sentences (such a model learns to start from zeros), but
    fit-state fitted a state into such a model without a word, and it read sentences worse (328.16 -> 374.38).
    It warns (naming --clear), and not for a stream model, whose start state fit-state is for."""
    for reading in ("streams", "sentences"):
        (tmp_path / reading).mkdir()
        result, train, _, _, out = pretrain_tiny(tmp_path / reading, *(["--sentences"] if reading == "sentences" else []))
        assert result.exit_code == 0, result.output
        assert json.loads((out / "config.json").read_text())["provenance"]["reading"] == reading
        result = runner.invoke(app, ["fit-state", str(out), str(train), "--rows", "4"])
        assert result.exit_code == 0, result.output
        assert ("was pretrained with --sentences" in plain(result.stderr)) == (reading == "sentences"), result.stderr
        assert ("--clear" in plain(result.stderr)) == (reading == "sentences")
        assert BiLM.load(out).initial_state is not None  # fitted either way: a warning, not a refusal


def test_evaluate_reads_text_the_way_the_model_was_trained(tmp_path):
    """A model of `pretrain --sentences` is evaluated per sentence unless --stream is given;
    a stream-trained model the other way round."""
    result, train, held, options, out = pretrain_tiny(tmp_path, "--sentences", "--max-length", "8")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["provenance"]["reading"] == "sentences"
    modes = {}
    for flag in ([], ["--stream"], ["--per-sentence"]):
        res = runner.invoke(app, ["evaluate", str(out), str(held), "--json", *flag])
        assert res.exit_code == 0, res.output
        modes[" ".join(flag)] = json.loads(res.output.strip().splitlines()[-1])
    assert modes[""]["mode"] == modes["--per-sentence"]["mode"] == "per_sentence" and modes["--stream"]["mode"] == "stream"
    assert modes[""]["perplexity"] == modes["--per-sentence"]["perplexity"] != modes["--stream"]["perplexity"]
    text = runner.invoke(app, ["evaluate", str(out), str(held)])
    assert "every sentence alone" in text.output
    # AllenNLP files cannot record the reading: the export says so and names the options that give it back
    # (it said nothing, and evaluating the export gave the stream perplexity as the model's).
    allen = tmp_path / "allen"
    with pytest.warns(UserWarning, match="holds the weights only") as caught:
        assert runner.invoke(app, ["export", str(out), str(allen)]).exit_code == 0
    (said,) = [str(w.message) for w in caught if "holds the weights only" in str(w.message)]
    flags = re.search(r"unless told \(([^)]*)\)", said).group(1).split()
    assert flags == ["--per-sentence"], said  # English, evaluate's default: no --lang to give
    told = runner.invoke(app, ["evaluate", str(allen), str(held), "--json", *flags])
    assert json.loads(told.output.strip().splitlines()[-1]) == modes[""]


def test_an_allennlp_export_warns_only_of_a_reading_its_readers_would_not_assume(tmp_path):
    """The export of every pretrain model warned that AllenNLP files drop how it reads text, naming evaluate's
    `--lang en` also for an English stream model, which evaluate's defaults (English, spaCy's English tokenizer,
    one stream) read the same way without the record. It names evaluate where it would read the text otherwise
    (another language or tokenizer, sentences), with the options that give it back; and for every model with a
    language, `embed --lang LANG`: embed splits an export's lines at whitespace (AllenNLP's reading)."""
    import spacy

    from spacy_elmo.bilm.allennlp_io import ENGLISH_TOKENIZER
    from spacy_elmo.training.data import tokenizer_settings

    assert ENGLISH_TOKENIZER == tokenizer_settings(spacy.blank("en"))
    result, _, _, _, out = pretrain_tiny(tmp_path, max_steps=1)
    assert result.exit_code == 0, result.output
    provenance = json.loads((out / "config.json").read_text())["provenance"]
    assert provenance["lang"] == "en" and provenance["reading"] == "streams" and provenance["tokenizer"]

    def said(model):
        allen = tmp_path / "allen"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = runner.invoke(app, ["export", str(model), str(allen), "--overwrite"])
        assert result.exit_code == 0, result.output
        return [str(w.message) for w in caught if "holds the weights only" in str(w.message)]

    # embed reads the export's lines at whitespace (no language recorded), the model's with spaCy's English
    # tokenizer: the warning names `embed --lang en` (it said nothing), and not evaluate, which reads both alike
    (message,) = said(out)
    assert "how the model was trained (language 'en')" in message and "(embed --lang en)" in message
    assert "evaluate" not in message
    text = tmp_path / "text.txt"
    text.write_text("Hello, world.\n", encoding="utf-8")
    counts = {}
    for name, model, flags in (("model", out, []), ("export", tmp_path / "allen", []),
                               ("export --lang en", tmp_path / "allen", ["--lang", "en"])):
        res = runner.invoke(app, ["embed", str(text), str(tmp_path / "o.h5"), "--model", str(model), "--overwrite",
                                  "--no-progress", *flags])
        assert res.exit_code == 0, res.output
        counts[name] = re.search(r"(\d+) tokens?", res.output.strip().splitlines()[-1]).group(1)
    assert counts == {"model": "4", "export": "2", "export --lang en": "4"}, counts
    model = BiLM.load(out)
    for changed, what, flags in (
        ({"lang": "de", "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}, "language 'de', its tokenizer", "--lang de"),
        ({"tokenizer": {"@tokenizers": "spacy.Tokenizer.v1", "custom": 1}}, "language 'en', its tokenizer", "--lang, --per-sentence"),
    ):
        model.save(tmp_path / "other", provenance={**provenance, **changed})
        (message,) = said(tmp_path / "other")
        assert f"how the model was trained ({what})" in message and f"unless told ({flags})" in message
        assert f"(embed --lang {changed.get('lang', 'en')})" in message and "Export with --format native" in message


def test_evaluate_warns_when_most_words_are_outside_the_vocabulary(tmp_path, recwarn):
    """Text the model's vocabulary hardly covers (another language) is nearly all <UNK> targets, which are easy
    to predict: evaluate printed a perplexity far "better" than the model's on its own language, without a word.
    It warns above EVAL_OOV_WARNING_RATE, naming the rate, and not on text of the model's language."""
    from spacy_elmo.training.evaluate import EVAL_OOV_WARNING_RATE

    result, _, held, _, out = pretrain_tiny(tmp_path, max_steps=1)
    assert result.exit_code == 0, result.output
    korean = tmp_path / "ko.txt"
    korean.write_text("은행에서 돈을 찾았어요 .\n강가에 앉아서 물을 바라보았다 .\n" * 5, encoding="utf-8")
    for text in (held, korean):
        recwarn.clear()
        res = runner.invoke(app, ["evaluate", str(out), str(text), "--json"])
        assert res.exit_code == 0, res.output
        rate = json.loads(res.output.strip().splitlines()[-1])["oov_rate"]
        said = [str(w.message) for w in recwarn if "are not in the vocabulary of" in str(w.message)]
        assert (rate > EVAL_OOV_WARNING_RATE) == (text == korean), rate
        if text == korean:
            (warned,) = said
            assert warned.startswith(f"spacy-elmo: {rate:.1%} of the words of {text} "), warned
        else:
            assert said == [], said


def test_a_resumed_run_says_how_far_it_trained_and_how_much_of_it_now(tmp_path):
    """Resumed from step 2 to 4, pretrain said "trained 4 steps", as if this run had made them all."""
    result, _, _, _, out = pretrain_tiny(tmp_path, max_steps=2)
    assert result.exit_code == 0, result.output
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--resume", max_steps=4)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "trained to step 4 (2 steps this run); corpus " in result.stdout, result.stdout
    result = runner.invoke(app, args)  # a finished run resumed: nothing more to train
    assert result.exit_code == 0, result.output
    assert "trained to step 4 (0 steps this run); corpus " in result.stdout, result.stdout


def test_a_resume_that_removes_a_fitted_state_says_so_once(tmp_path):
    """A state fit-state had fitted into the output folder was deleted without a word by the resume's first
    save (it belongs to the old weights: removing it is right). A warning names the file and fit-state, once."""
    from spacy_elmo.bilm.native_io import INITIAL_STATE_NAME

    result, train, _, _, out = pretrain_tiny(tmp_path, max_steps=2)
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["fit-state", str(out), str(train), "--rows", "4", "--no-progress"]).exit_code == 0
    assert (out / INITIAL_STATE_NAME).exists()
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--resume", "--checkpoint-every", "1", max_steps=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = [str(w.message) for w in caught if INITIAL_STATE_NAME in str(w.message)]
    assert len(said) == 1, said  # saved at steps 3 and 4: warned at the first alone
    assert said[0].startswith(f"spacy-elmo: {out / INITIAL_STATE_NAME} (an initial state fitted by `spacy-elmo fit-state`")
    assert "removed with the model of step 3" in said[0] and f"Run `spacy-elmo fit-state {out} TEXT` again" in said[0]
    assert not (out / INITIAL_STATE_NAME).exists() and BiLM.load(out).initial_state is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, tiny_pretrain_args(tmp_path, out, "--resume", max_steps=5)[0])  # nothing to remove
    assert result.exit_code == 0 and not [w for w in caught if INITIAL_STATE_NAME in str(w.message)], result.output
    # a resume that fits a state of its own (--state-sentences) replaces the file: nothing was lost, no warning
    assert runner.invoke(app, ["fit-state", str(out), str(train), "--rows", "4", "--no-progress"]).exit_code == 0
    fitted = (out / INITIAL_STATE_NAME).read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = tiny_pretrain_args(tmp_path, out, "--resume", "--state-sentences", "40", max_steps=6)[0]
        result = runner.invoke(app, args)
    assert result.exit_code == 0 and not [w for w in caught if INITIAL_STATE_NAME in str(w.message)], result.output
    assert (out / INITIAL_STATE_NAME).read_bytes() != fitted and BiLM.load(out).initial_state is not None


def test_export_guards_its_output(tmp_path):
    result, _, held, _, out = pretrain_tiny(tmp_path, max_steps=1)
    assert result.exit_code == 0, result.output
    assert "trained 1 step; corpus " in result.output  # was "1 steps"
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "config.json").write_text("{}")  # another model's file
    result = runner.invoke(app, ["export", str(out), str(dest), "--format", "allennlp"])
    assert result.exit_code == 1 and "not empty" in result.output and "--overwrite" in result.output
    assert [p.name for p in dest.iterdir()] == ["config.json"]  # untouched
    result = runner.invoke(app, ["export", str(out), str(dest), "--format", "allennlp", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in dest.iterdir()) == ["options.json", "softmax.safetensors", "vocab.txt", "weights.hdf5"]
    torch.testing.assert_close(BiLM.load(dest).state_dict(), BiLM.load(out).state_dict())
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["export", str(out), str(afile), "--format", "native"])
    assert result.exit_code == 1 and "is a file" in result.output


@pytest.mark.parametrize("size", ["0", "-3"])
def test_evaluate_rejects_bad_batch_size(tmp_path, size):
    """It said "batch_size must be ..." (the Python name) after loading the model; now a usage
    error naming the flag as typed, before (the model directory is never looked at)."""
    result = runner.invoke(app, ["evaluate", str(tmp_path / "no-model"), str(tmp_path / "no-text"), "--batch-size", size])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--batch-size': must be a positive integer (1 or more); found {size}." in plain(result.output)
    assert "batch_size" not in result.output and "no-model" not in result.output


BOUND = "must be 0 (no cap) or more than 3 (the markers and at least one word)"
UNKNOWN_DEVICE = "Unknown --device 'tpu': use cpu, cuda, cuda:N (a GPU index) or mps."
UNKNOWN_LANG = ("spaCy could not load language 'zz' (ImportError: [E048] Can't import language zz or any matching "
                "language from spacy.lang: No module named 'spacy.lang.zz'): use a language code spaCy supports "
                "(en, de, ko, ja, xx for multi-language, ...: https://spacy.io/usage/models#languages).")


BAD_OPTIONS = [
    *[(["pretrain", "{tmp}/no-text", "{tmp}/out", flag, "0"], flag, "must be a positive integer (1 or more); found 0.")
      for flag in ["--min-count", "--max-steps", "--batch-size", "--unroll", "--max-length", "--length-pool", "--negatives",
                   "--checkpoint-every", "--log-every", "--threads"]],
    *[(["pretrain", "{tmp}/no-text", "{tmp}/out", flag, "-1"], flag, "must be an integer of 0 or more; found -1.")
      for flag in ["--state-sentences", "--seed"]],
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--vocab-size", "3"], "--vocab-size", f"{BOUND}; found 3."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--vocab-size", "-1"], "--vocab-size", f"{BOUND}; found -1."),
    *[(["pretrain", "{tmp}/no-text", "{tmp}/out", "--epochs", value], "--epochs",
       "must be positive and finite, at most 1.949e+289 (so that its steps, up to 2**63 an epoch, can be counted; to train "
       f"until stopped: a large --max-steps); found {found}.") for value, found in [("0", "0.0"), ("nan", "nan"), ("1e308", "1e+308")]],
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--lr", "-0.1"], "--lr", "must be positive and finite; found -0.1."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--clip", "0"], "--clip",
     "must be positive (a global gradient-norm bound); found 0.0."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--dropout", "1"], "--dropout", "must be in [0, 1); found 1.0."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--dropout", "-0.5"], "--dropout", "must be in [0, 1); found -0.5."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--optimizer", "sgd"], "--optimizer",
     "Unknown optimizer 'sgd': use 'adagrad' or 'adam'."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--backend", "cuda"], "--backend",
     "Unknown backend 'cuda': use 'auto', 'fused' or 'reference'."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--preset", "huge"], "--preset",
     "Unknown preset 'huge'. Choose one of: small, medium, original."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--options", "{tmp}/no-options.json"], "--options",
     "The model options file"),
    # an empty value ("$PRESET" unset) is checked as any other, not taken for no value (the default)
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--preset", ""], "--preset",
     "Unknown preset ''. Choose one of: small, medium, original."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--backend", ""], "--backend",
     "Unknown backend '': use 'auto', 'fused' or 'reference'."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--device", ""], "--device",
     "Unknown --device '': use cpu, cuda, cuda:N (a GPU index) or mps."),
    (["export", "{tmp}/no-model", "{tmp}/out", "--format", "onnx"], "--format",
     "Unknown export format 'onnx': use 'allennlp' or 'native'."),
    (["config", "coref", "{tmp}/out"], "NAME", "No shipped training config named 'coref'; the configs are: ner, parser, textcat."),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--device", "tpu"], "--device", UNKNOWN_DEVICE),
    (["evaluate", "{tmp}/no-model", "{tmp}/no-text", "--device", "tpu"], "--device", UNKNOWN_DEVICE),
    (["embed", "{tmp}/no-text", "{tmp}/out", "--device", "tpu"], "--device", UNKNOWN_DEVICE),
    (["pretrain", "{tmp}/no-text", "{tmp}/out", "--lang", "zz"], "--lang", UNKNOWN_LANG),
    (["evaluate", "{tmp}/no-model", "{tmp}/no-text", "--lang", "zz"], "--lang", UNKNOWN_LANG),
    (["embed", "{tmp}/no-text", "{tmp}/out", "--lang", "zz"], "--lang", UNKNOWN_LANG),
    (["fit-state", "{tmp}/no-model", "{tmp}/no-text", "--lang", "zz"], "--lang", UNKNOWN_LANG),
]


@pytest.mark.parametrize("args, flag, expected", BAD_OPTIONS, ids=[" ".join(a[:1] + a[3:]) for a, _, _ in BAD_OPTIONS])
def test_option_errors_name_the_flag_as_typed(tmp_path, args, flag, expected):
    """--vocab-size, --epochs, --lr, --clip, --dropout, --optimizer, --backend and pretrain's integer
    options were checked by TrainConfig (naming the field: "vocab_size must be ...", exit 1; after the
    corpus had been read); --preset, --options, export --format and config's NAME were usage errors
    that named no option ("Invalid value: ..."); --device was an error of exit 1, and --lang one only
    when spaCy built the tokenizer (after the corpus had been listed or the model loaded). Now each
    is a usage error naming what was typed, before any model, corpus or output is touched."""
    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}': {expected}" in plain(result.output)
    python_name = flag[2:].replace("-", "_")  # vocab_size, ...: TrainConfig's name
    assert python_name == flag[2:] or python_name not in result.output
    assert not (tmp_path / "out").exists()


def test_pretrain_options_errors_name_the_file_and_no_weight_file(tmp_path):
    """r9: `pretrain --options options.json` with a bad value said "The ELMo options in the given dict" (pretrain
    parsed the file and passed the dict) and "use the options.json that came with the weight file", though
    pretraining from scratch has none. They name the file, and the fix is the key's."""
    from tests.bilm.test_config import options as allennlp_options

    for change in (lambda o: o["lstm"].pop("use_skip_connections"), lambda o: o["lstm"].__setitem__("dim", 0)):
        opts = allennlp_options()
        change(opts)
        path = tmp_path / "options.json"
        path.write_text(json.dumps(opts))
        result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(path)])
        said = plain(result.output)
        assert result.exit_code == 2 and f"The ELMo options in {path} " in said, said
        assert "given dict" not in said and "weight file" not in said, said
        # its own message names the file, the key and the fix: not wrapped in "Could not read ... Pass an options.json"
        assert "Could not read" not in said and said.count(str(path)) == 1, said


def test_options_errors_are_said_in_the_command_lines_words(tmp_path):
    """--options with a key that is no field (a Hugging Face config.json) said "... not from_dict).. Pass": a
    double full stop, and the Python API's advice (from_allennlp_options, from_dict). BiLMConfig.from_dict
    itself still says the Python API's words."""
    options = tmp_path / "config.json"
    options.write_text(json.dumps({"architectures": ["X"], "model_type": "bert", "cell_dim": 32}))
    said = plain(runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(options)]).output)
    assert f"Invalid value for '--options': The model options {options} have key(s) 'architectures', 'model_type'" in said, said
    assert "from_dict" not in said and "from_allennlp_options" not in said and ".." not in said
    with pytest.raises(ValueError, match=r"from_allennlp_options, not from_dict\)\.$"):
        BiLMConfig.from_dict({"model_type": "bert"})
    # a message of its own, ending in a full stop, is one sentence of the command's: no ".."
    options.write_text(json.dumps({"n_layers": -1}))
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(options)])
    said = plain(result.output)
    assert result.exit_code == 2, said
    said = " ".join(said.replace("│", " ").split())
    assert (f"The model options {options} have an invalid n_layers: n_layers must be a positive integer; found -1. "
            "Fix n_layers there.").replace(" ", "") in said.replace(" ", ""), said  # a long path wraps anywhere
    assert ".." not in said and "Could not read" not in said, said


@pytest.mark.parametrize("text, kind", [("[1, 2]", "array"), ('"small"', "string"), ("[]", "array"), ("5", "number"),
                                        ("null", "null")])
def test_options_holding_no_json_object_say_so(tmp_path, text, kind):
    """--options with a JSON array or string read its items (characters) as keys ("have key(s) 1, which are no model
    options"), and a number, null or [] said a Python error ("'int' object is not iterable", "argument after ** must
    be a mapping, not list"). Each says what the file holds and what --options takes, a usage error."""
    options = tmp_path / "options.json"
    options.write_text(text)
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(options)])
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    assert (f"Invalid value for '--options': Could not read the model options {options}: it holds a JSON {kind}, not an "
            "object. Pass an AllenNLP options.json") in said, said
    assert "key(s)" not in said and "iterable" not in said and "mapping" not in said, said
    assert not (tmp_path / "out").exists()


def _refused_sizes(tmp_path, sizes: dict) -> tuple:
    """pretrain --options of ``sizes`` refused as a usage error: (the options file, the message, it without spaces,
    as a long path is wrapped anywhere in the error box)."""
    options = tmp_path / "options.json"
    options.write_text(json.dumps(sizes))
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(options)])
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    return options, said, said.replace(" ", "")


def test_options_of_sizes_too_large_together_say_to_shrink_them(tmp_path):
    """Sizes too large together in an --options file named every size of the LSTM, n_layers=1 among them, and then
    said "Fix projection_dim there.": now those that make it too large, to shrink, one alone maybe not enough
    (diffrev1; "Fix one of them there." was false for projection_dim=cell_dim=2**40, n_layers=2**20: diffrev3)."""
    options, said, squeezed = _refused_sizes(tmp_path, {"projection_dim": 2**33, "cell_dim": 2**33, "n_layers": 1})
    assert (f"Themodeloptions{options}havesizestoolargetogether,projection_dim,cell_dim:Thesesizesmake"
            in squeezed), said
    assert "the most bytes are of projection_dim=8589934592, cell_dim=8589934592 together" in said, said
    assert said.rstrip("╰─╯ ").endswith("One alone may not be enough: shrink them there."), said
    assert "n_layers=1" not in said and "Fix projection_dim" not in said, said


def test_options_of_sizes_each_too_large_alone_say_to_fix_each(tmp_path):
    """Two sizes each too large alone in an --options file were both named, then "Fix cell_dim there.": the first
    only, which shrunk alone left the model too large (diffrev3). Each is named, each to fix."""
    options, said, squeezed = _refused_sizes(tmp_path, {"cell_dim": 2**61, "max_characters_per_token": 2**62})
    assert (f"Themodeloptions{options}havesizeseachtoolargealone,cell_dim,max_characters_per_token:Thesesizesmake"
            in squeezed), said
    assert said.rstrip("╰─╯ ").endswith("Fix each of them there."), said
    assert "Fix cell_dim" not in said, said


def test_options_nested_past_the_recursion_limit_are_a_usage_error(tmp_path):
    """A JSON file nested deeper than Python's recursion limit ended pretrain with a RecursionError's traceback; it
    is read as any unreadable options file is (diffrev2)."""
    options = tmp_path / "options.json"
    options.write_text("[" * 100_000 + "]" * 100_000)
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(options)])
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2 and not isinstance(result.exception, RecursionError), (result.exception, said)
    assert f"Invalid value for '--options': Could not read the model options {options}: maximum recursion depth" in said
    assert not (tmp_path / "out").exists()


def test_pretrain_options_with_a_utf8_byte_order_mark_are_read(tmp_path):
    """`pretrain --options` of a file with a UTF-8 BOM first (Notepad, PowerShell) was a usage error ("Unexpected
    UTF-8 BOM"): read as without it, what is refused then is the missing text, not --options."""
    from tests.bilm.test_config import options as allennlp_options

    path = tmp_path / "options.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(allennlp_options()).encode("utf-8"))
    said = plain(runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"),
                                     "--options", str(path)]).output)
    assert "no-text" in said and "'--options'" not in said and "BOM" not in said, said


def test_pretrain_options_that_cannot_be_read_say_the_os_error(tmp_path, monkeypatch):
    """An OSError reading --options (no read permission) said "Could not read the model options ...: [Errno 13]
    Permission denied ... Pass an AllenNLP options.json, ...", though it was one: the OS error, and to check it."""
    from tests.bilm.test_config import unreadable_options

    path = unreadable_options(tmp_path, monkeypatch)
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(path)])
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    assert "Permission denied" in said and "give this account read permission" in said, said
    assert "Pass an AllenNLP options.json" not in said and not (tmp_path / "out").exists(), said


def test_pretrain_options_given_a_weight_file_says_it_is_one(tmp_path):
    """`pretrain --options weights.hdf5` (the weight file where the options go) said "'utf-8' codec can't decode
    byte 0x89": pretrain reads the file itself. It says the file is an HDF5 weight file and that --options takes
    the options JSON, as BiLMConfig.from_allennlp_options does for swapped arguments (one detection: is_hdf5)."""
    allen = tmp_path / "allen"
    with warnings.catch_warnings():  # what AllenNLP will not run, said elsewhere
        warnings.simplefilter("ignore")
        BiLM(BiLMConfig(**TINY)).to_allennlp(allen / "options.json", allen / "weights.hdf5")
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"),
                                 "--options", str(allen / "weights.hdf5")])
    said = plain(result.output)
    assert result.exit_code == 2, said
    expected = f"Invalid value for '--options': {allen / 'weights.hdf5'} is an HDF5 file (ELMo weights), not model options: " \
        "--options takes the options JSON"
    assert "".join(expected.split()) in "".join(said.split()), said  # the box may break the long path anywhere
    assert "utf-8" not in said and not (tmp_path / "out").exists()
    # the options file beside it reads: what is refused then is the missing text, not --options
    said = plain(runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"),
                                     "--options", str(allen / "options.json")]).output)
    assert "no-text" in said and "'--options'" not in said, said


def test_pretrain_fused_backend_without_the_extension_is_a_usage_error(tmp_path, monkeypatch):
    """It was refused only when the model was built, after the corpus had been tokenized."""
    monkeypatch.setattr("spacy_elmo.ops.fused_available", lambda: False)
    monkeypatch.setattr("spacy_elmo.ops.load_extension", lambda: (None, "no _C here"))
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--backend", "fused"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--backend': backend='fused' needs the compiled extension" in plain(result.output)
    assert "no _C here" in plain(result.output) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, values", [
    ("--vocab-size", ["-1", "0", "1", "3", "4", "1000"]),
    ("--epochs", ["-1", "0", "1e-9", "0.5", "1.949e289", "1.95e289", "1e308", "inf", "nan"]),
    ("--lr", ["-1", "0", "1e-9", "inf", "nan"]),
    ("--clip", ["-1", "0", "1e-9", "10", "inf", "nan"]),
    ("--dropout", ["-0.1", "-0.0", "0", "0.5", "0.999", "1", "inf", "nan"]),
    ("--optimizer", ["adagrad", "adam", "Adam", "sgd"]),
    ("--seed", ["-1", "0", "7"]),
])
def test_pretrain_option_callbacks_accept_what_train_config_accepts(tmp_path, monkeypatch, flag, values):
    """The CLI is no stricter and no looser than TrainConfig.validate: a value passes the option's
    callback exactly when the TrainConfig it makes validates."""
    from spacy_elmo.training.trainer import TrainConfig

    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: {"rank": 1})  # no run
    field = flag[2:].replace("-", "_")
    kind = {"vocab_size": int, "seed": int, "optimizer": str}.get(field, float)
    for value in values:
        try:
            TrainConfig(train_path="t", output_dir="o", **{field: kind(value)}).validate()
            valid = True
        except ValueError:
            valid = False
        result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "o"), flag, value,
                                     "--return-freed-memory"])
        assert result.exit_code == (0 if valid else 2), (value, result.output)


@pytest.mark.parametrize("flags, expected", [([], None), (["--prefetch"], True), (["--no-prefetch"], False)])
def test_pretrain_prefetch_flags_reach_the_train_config(tmp_path, monkeypatch, flags, expected):
    """--prefetch / --no-prefetch force the step preparation ahead on or off; neither: None (on with CUDA)."""
    seen = []
    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: seen.append(cfg) or {"rank": 1})
    result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "o"), *flags, "--return-freed-memory"])
    assert result.exit_code == 0, result.output
    assert [cfg.prefetch for cfg in seen] == [expected]


@pytest.mark.parametrize("lang", ["en", "de", "ja", "xx", "eng", "EN", "zz", "en.stop_words", ""])
def test_lang_is_refused_at_parse_time_exactly_when_spacy_cannot_build_it(tmp_path, monkeypatch, lang):
    """--lang's callback is no stricter and no looser than make_nlp (spacy.blank, with the rule-based
    tokenizer when a language's tokenizer package is missing, as ja's here may be)."""
    from spacy_elmo.training.data import make_nlp

    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: {"rank": 1})  # no run
    try:
        make_nlp(lang)
        valid = True
    except ValueError:
        valid = False
    result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "o"), "--lang", lang,
                                 "--return-freed-memory"])
    assert result.exit_code == (0 if valid else 2), result.output


def test_a_missing_options_file_is_named(tmp_path):
    """--options naming no file says which path it looked for."""
    missing = tmp_path / "no-options.json"
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(missing)])
    said = "".join(plain(result.output).replace("│", "").split())  # the box may break the long path anywhere
    assert result.exit_code == 2, result.output
    assert "".join(f"Invalid value for '--options': The model options file {missing} does not exist".split()) in said, said


def test_preset_and_options_together_are_a_usage_error(tmp_path):
    """--preset with --options: two model sizes asked for; neither is taken over the other."""
    options = tmp_path / "tiny.json"
    options.write_text(json.dumps(TINY))
    result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--preset", "small",
                                 "--options", str(options)])
    assert result.exit_code == 2, result.output
    assert "Pass either --preset or --options, not both." in plain(result.output)
    assert not (tmp_path / "out").exists()


def test_preset_reaches_the_train_config_as_its_sizes(tmp_path, monkeypatch):
    """--preset medium trains the medium model; without --preset or --options the trainer picks (None)."""
    seen = []
    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: seen.append(cfg) or {"rank": 1})
    for extra in (["--preset", "medium"], []):
        result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "o"), *extra, "--return-freed-memory"])
        assert result.exit_code == 0, result.output
    assert [cfg.model for cfg in seen] == [BiLMConfig.preset("medium").to_dict(), None]


@pytest.mark.parametrize("flags, kept", [([], True), (["--keep-freed-memory"], True), (["--return-freed-memory"], False)])
def test_pretrain_keeps_freed_memory_unless_told_to_return_it(tmp_path, monkeypatch, flags, kept):
    """--keep-freed-memory (the default) sets glibc's malloc to keep freed memory; --return-freed-memory leaves
    malloc as it is."""
    calls = []
    monkeypatch.setattr("spacy_elmo.training.malloc.keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: {"rank": 1})  # no run
    result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "o"), *flags])
    assert result.exit_code == 0, result.output
    assert calls == ([1] if kept else [])


def test_pretrain_flag_errors(tmp_path):
    train = write_corpus(tmp_path / "train.txt", 50)
    result = runner.invoke(app, ["pretrain", str(train), str(tmp_path / "a"), "--preset", "huge"])
    assert result.exit_code == 2 and "huge" in result.output and "small" in result.output
    result = runner.invoke(app, ["pretrain", str(train), str(tmp_path / "b"), "--init", "default", "--preset", "small"])
    assert result.exit_code == 2 and "drop --preset/--options" in result.output


@pytest.mark.parametrize("reading", ["sentences", "streams"])
def test_fine_tuning_a_sentence_model_without_sentences_warns(tmp_path, reading):
    """`pretrain domain.txt tuned/ --init default` fine-tuned the bundled sentence model on streams and wrote a
    stream model (provenance "reading": "streams", evaluate's default then the stream), without a word. Said
    at the start, naming --sentences; not with --sentences, and not of a stream model's init (a choice the
    README describes both ways round)."""
    result, train, _, _, base = pretrain_tiny(tmp_path, *(["--sentences"] if reading == "sentences" else []), max_steps=1)
    assert result.exit_code == 0, result.output
    for n, extra in enumerate([[], ["--sentences"]]):
        args = ["pretrain", str(train), str(tmp_path / f"tuned{n}"), "--init", str(base), "--max-steps", "1", "--batch-size", "4",
                "--negatives", "8", "--threads", "1", "--backend", "reference", "--no-progress", *extra]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        said = [str(w.message) for w in caught if "was pretrained with --sentences" in str(w.message)]
        if reading == "sentences" and not extra:
            (message,) = said
            assert message.startswith(f"spacy-elmo: --init {base} was pretrained with --sentences") and "Add --sentences" in message
        else:
            assert said == [], said
        written = json.loads((tmp_path / f"tuned{n}" / "config.json").read_text())["provenance"]["reading"]
        assert written == ("sentences" if extra else "streams")


def test_pretrain_init_from_a_damaged_model_is_a_clear_error(tmp_path):
    model = tmp_path / "damaged"
    BiLM(BiLMConfig(**TINY)).save(model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    train = write_corpus(tmp_path / "train.txt", 20)
    result = runner.invoke(app, ["pretrain", str(train), str(tmp_path / "out"), "--init", str(model), "--no-progress"])
    assert result.exit_code == 1 and "is damaged or not a safetensors file" in result.output
    assert isinstance(result.exception, SystemExit)  # reported, not a traceback


@pytest.mark.parametrize("extra, named", [
    (["--sentences", "--unroll", "35"], "--unroll 35 has no effect with --sentences"),
    (["--max-length", "50"], "--max-length 50 only applies with --sentences"),
    (["--length-pool", "1"], "--length-pool 1 only applies with --sentences"),
    (["--sentences", "--state-sentences", "2048"], "--state-sentences 2048 fits a start state for a stream-trained"),
    (["--new-vocab"], "--new-vocab only applies with --init"),
    (["--init", "default", "--preset", "small"], "--init fine-tunes an existing model"),
    (["--max-steps", "3", "--epochs", "1"], "Pass either --max-steps or --epochs, not both."),
])
def test_pretrain_refuses_an_option_its_reading_does_not_use(tmp_path, extra, named):
    """An option the chosen reading ignores (streams or --sentences) was meant for the other reading, and
    --new-vocab or --preset go with a new run or a fine-tuning alone: a usage error (exit 2, as an option's
    value; it was 1, a failed run's, but for --max-steps with --epochs) naming it, before anything is read
    or written."""
    train = write_corpus(tmp_path / "train.txt", 50)
    out = tmp_path / "out"
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--no-progress", *extra])
    assert result.exit_code == 2 and named in plain(result.output), result.output
    assert not out.exists()


def test_pretrain_defaults_are_the_trainers():
    """The reading checks compare a value with TrainConfig's default: the command's must be the same."""
    import dataclasses

    import typer

    from spacy_elmo.training.trainer import TrainConfig

    command = typer.main.get_command(app).commands["pretrain"]
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    shared = {p.name: p.default for p in command.params if p.name in fields and p.name not in ("train_path", "output_dir")}
    assert {"unroll", "max_length", "length_pool", "vocab_size", "min_count", "state_sentences"} <= set(shared)
    assert shared == {name: fields[name] for name in shared}


def test_pretrain_output_dir_that_is_a_file_is_a_clear_error(tmp_path):
    """OUTPUT_DIR an existing file (or under one) was a NotADirectoryError traceback."""
    train = write_corpus(tmp_path / "train.txt", 50)
    afile = tmp_path / "afile"
    afile.write_text("keep me", encoding="utf-8")
    result = runner.invoke(app, ["pretrain", str(train), str(afile), "--no-progress"])
    assert result.exit_code == 1 and f"OUTPUT_DIR {afile} is a file" in result.output, result.output
    assert isinstance(result.exception, SystemExit) and afile.read_text(encoding="utf-8") == "keep me"
    result = runner.invoke(app, ["pretrain", str(train), str(afile / "out"), "--no-progress"])
    said = plain(result.output)
    assert result.exit_code == 1 and f"{afile} is a file, not a directory" in said and "Errno" not in said, said
    assert isinstance(result.exception, SystemExit)  # reported, not a traceback


def test_options_takes_a_spacy_elmo_model_its_config_json_or_an_allennlp_directory(tmp_path):
    """`--options out/config.json` (a pretrain model's own config.json, which "options" suggests) was refused as
    having no model options, with advice about AllenNLP files, and `--options out` was "[Errno 21] Is a
    directory": both give the model's sizes, as does a directory of AllenNLP files; the weights are not taken
    (a new model; --init fine-tunes one). A directory holding none of these is a usage error saying what to pass."""
    sizes = dict(TINY, cell_dim=24, projection_dim=6)
    base = tmp_path / "base"
    BiLM(BiLMConfig(**sizes)).save(base)
    with pytest.warns(UserWarning, match="AllenNLP will not run this model"):  # TINY's 20 characters a token
        BiLM.load(base).to_allennlp(tmp_path / "allen_options.json", tmp_path / "allen_weights.hdf5")
    allen = tmp_path / "allen"
    allen.mkdir()
    for name in ("allen_options.json", "allen_weights.hdf5"):
        (tmp_path / name).rename(allen / name)
    for n, given in enumerate([base / "config.json", base, allen]):
        out = tmp_path / f"out{n}"
        args = [a if a != str(tmp_path / "tiny.json") else str(given) for a in tiny_pretrain_args(tmp_path, out, max_steps=1)[0]]
        assert str(given) in args
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        trained = BiLM.load(out)
        assert trained.config == BiLM.load(base).config and trained.config.cell_dim == 24
        first = next(iter(trained.state_dict()))  # a new model's weights, not the directory's
        assert not torch.equal(trained.state_dict()[first], BiLM.load(base).state_dict()[first])
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a if a != str(tmp_path / "tiny.json") else str(empty) for a in tiny_pretrain_args(tmp_path, tmp_path / "x")[0]]
    result = runner.invoke(app, args)
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2 and "holding neither a spacy-elmo config.json nor one AllenNLP" in said, said
    assert "Errno" not in said and not (tmp_path / "x").exists()


def test_options_refuses_a_directory_of_two_allennlp_options_and_a_config_json_of_another_version(tmp_path):
    """A directory of two AllenNLP *options*.json files (which one?) is refused naming the count and the files, not
    read as its first; a spacy-elmo config.json is checked as BiLM.load checks it (read_config_json): another format version
    (a newer spacy-elmo's) is its version error, not sizes read from a file this version may read otherwise."""
    base = tmp_path / "base"
    BiLM(BiLMConfig(**TINY)).save(base)
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a_options.json", "b_options.json"):
        (two / name).write_text(json.dumps(TINY))
    newer = tmp_path / "newer"
    newer.mkdir()
    meta = json.loads((base / "config.json").read_text())
    (newer / "config.json").write_text(json.dumps({**meta, "version": 99}))
    for given, words in [(two, "nor one AllenNLP *options*.json (2 found: a_options.json, b_options.json)"), (newer, "has format version 99")]:
        out = tmp_path / f"out-{given.name}"
        args = [a if a != str(tmp_path / "tiny.json") else str(given) for a in tiny_pretrain_args(tmp_path, out, max_steps=1)[0]]
        result = runner.invoke(app, args)
        said = " ".join(plain(result.output).replace("│", " ").split())
        assert result.exit_code == 2 and words in said, said
        assert not out.exists()


def test_options_directory_whose_options_json_is_a_directory_is_said_so(tmp_path):
    """A model directory holding a directory named like an options file (elmo_options.json/) said "Could not read
    ...: [Errno 21] Is a directory ... give this account read permission", then E_OPTIONS_IS_DIR, whose advice is for
    the Python API (BiLM.load(directory)): now such a directory is no options file, and the model directory holds
    none (E_OPTIONS_DIR, "0 found"), nothing written. Beside a real options.json it is not counted: that file is read
    (it was refused as "2 found")."""
    from spacy_elmo.cli.pretrain import model_config

    model = tmp_path / "model"
    (model / "elmo_options.json").mkdir(parents=True)
    out = tmp_path / "out"
    args = [a if a != str(tmp_path / "tiny.json") else str(model) for a in tiny_pretrain_args(tmp_path, out)[0]]
    result = runner.invoke(app, args)
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2 and "nor one AllenNLP *options*.json (0 found; elmo_options.json/ is a directory, not a file)" in said, said
    assert "BiLM.load" not in said and "Errno" not in said and "read permission" not in said and not out.exists()
    with pytest.warns(UserWarning, match="AllenNLP will not run this model"):  # TINY's 20 characters a token
        BiLM(BiLMConfig(**TINY)).to_allennlp(model / "options.json", tmp_path / "weights.hdf5")
    (model / "elmo_options.json").rename(model / "old_options.json")
    assert BiLMConfig.from_dict(model_config(None, model)) == BiLMConfig(**TINY)
    # a dangling link (an annex file not fetched) is counted, and said missing: not "0 found", not "read permission"
    (model / "options.json").unlink()
    (model / "options.json").symlink_to(model / "gone.json")
    with pytest.raises(typer.BadParameter) as err:
        model_config(None, model)
    assert str(model / "options.json") in str(err.value) and "does not exist" in str(err.value), str(err.value)
    assert "0 found" not in str(err.value) and "read permission" not in str(err.value), str(err.value)
    assert f"is a broken symbolic link: it points to {model / 'gone.json'}" in str(err.value), str(err.value)
    # a link in a loop: no file to read, not a read permission to give (it was E_OPTIONS_UNREADABLE, "[Errno 40]")
    (model / "options.json").unlink()
    (model / "options.json").symlink_to(model / "options.json")
    for given in (model, model / "options.json"):
        with pytest.raises(typer.BadParameter) as err:
            model_config(None, given)
        assert "past too many levels of symbolic links" in str(err.value), str(err.value)
        assert "read permission" not in str(err.value) and "Errno" not in str(err.value), str(err.value)


def test_a_stream_run_ends_naming_the_sentence_stage_for_the_component(tmp_path):
    """The README's first pretraining command trains on streams, which the elmo component reads a sentence at a
    time badly (the bundled model: 1,632.65 per sentence after streams, 232.25 after the sentence stage), and the
    run ended saying nothing of it. Its summary ends with the next command (`--init OUT --sentences`), which runs as
    printed and writes a sentence model; a --sentences run's does not. The command keeps the run's options that
    differ from their defaults and carry over (--batch-size, --backend, --threads... were dropped: the stage ran
    at batch 128 with the kernels of auto), not the stream-only ones (--unroll), the model's (--options: --init
    gives it) or the run's length (--max-steps), and the line says how long it trains without one."""
    import shlex

    from .conftest import write_corpus as corpus

    held = corpus(tmp_path / "held out.txt", 30, seed=2)
    result, train, _, _, out = pretrain_tiny(tmp_path, "--heldout", str(held), "--lang", "xx", "--batch-size", "3",
                                             "--seed", "7", "--no-prefetch", max_steps=1)
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("for the spaCy elmo component, which reads every sentence alone, go on with whole sentences "
                           "(10 epochs unless you add --max-steps or --epochs): ")
    words = shlex.split(last.split(": ", 1)[1])
    beside = tmp_path / "model-sentences"
    assert words == ["spacy-elmo", "pretrain", str(train), str(beside), "--init", str(out), "--sentences",
                     "--heldout", str(held), "--lang", "xx", "--batch-size", "3", "--negatives", "8", "--seed", "7",
                     "--backend", "reference", "--threads", "1", "--no-prefetch", "--no-progress"]
    again = runner.invoke(app, words[1:] + ["--max-steps", "1"])  # the tiny run's settings come with the command
    assert again.exit_code == 0, again.output
    assert json.loads((beside / "config.json").read_text())["provenance"]["reading"] == "sentences"
    ran = next(event["config"] for event in read_log(beside) if "config" in event)
    assert (ran["batch_size"], ran["seed"], ran["backend"], ran["lang"], ran["prefetch"]) == (3, 7, "reference", "xx", False)
    assert "go on with whole sentences" not in again.stdout


def test_the_sentence_stage_command_carries_the_device_and_parses_back(tmp_path):
    """--device cuda went unsaid (the stage would train on the CPU, pretrain's default); every pretrain option is
    either carried or left, by name, so a new one is decided here; and the printed words parse back to the run's
    values of the carried options."""
    import shlex

    import typer

    from spacy_elmo.cli.pretrain import STAGE_CARRIES, STAGE_LEAVES, sentence_stage

    command = typer.main.get_command(app).commands["pretrain"]
    assert not set(STAGE_CARRIES) & set(STAGE_LEAVES)
    assert set(STAGE_CARRIES) | set(STAGE_LEAVES) == {param.name for param in command.params}
    train, out = tmp_path / "train.txt", tmp_path / "out"
    args = [str(train), str(out), "--batch-size", "64", "--threads", "2", "--backend", "reference", "--lr", "0.05",
            "--optimizer", "adam", "--unroll", "10", "--max-steps", "4500", "--return-freed-memory", "--prefetch"]
    ctx = command.make_context("pretrain", list(args))
    ctx.params["device"] = "cuda"  # what --device cuda gives on a machine with a GPU (this one may have none)
    words = shlex.split(sentence_stage(ctx, train, out))
    assert words[:7] == ["spacy-elmo", "pretrain", str(train), str(tmp_path / "out-sentences"), "--init", str(out), "--sentences"]
    assert words[7:] == ["--batch-size", "64", "--optimizer", "adam", "--lr", "0.05", "--device", "cuda", "--backend",
                         "reference", "--threads", "2", "--prefetch", "--return-freed-memory"]
    # options given at their defaults go unsaid, as those not given (10.0 given is another float object than the default)
    at_defaults = [str(train), str(out), "--clip", "10", "--dropout", "0.1", "--checkpoint-every", "1000", "--device", "cpu",
                   "--optimizer", "adagrad", "--keep-freed-memory"]
    assert shlex.split(sentence_stage(command.make_context("pretrain", at_defaults), train, out))[7:] == []
    # OUTPUT_DIR the current directory (its name ""): the stage's goes to model-sentences, not "-sentences" (an option)
    from pathlib import Path

    here = shlex.split(sentence_stage(command.make_context("pretrain", [str(train), "."]), train, Path(".")))
    assert here[3:6] == ["model-sentences", "--init", "."], here
    ctx.params["device"] = "cpu"
    back = command.make_context("pretrain", [word for word in words[2:] if word not in ("--device", "cuda")])
    assert back.params["sentences"] and back.params["init"] == str(out) and back.params["max_steps"] is None
    assert back.params["unroll"] == 20  # stream-only: an error with --sentences
    assert {name: back.params[name] for name in STAGE_CARRIES} == {name: ctx.params[name] for name in STAGE_CARRIES}


@pytest.mark.parametrize("env, start", [
    ({}, ["spacy-elmo"]),  # one process
    ({"WORLD_SIZE": "4"}, ["torchrun", "--nproc-per-node", "4", "-m", "spacy_elmo"]),  # without LOCAL_WORLD_SIZE
    ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, ["torchrun", "--nproc-per-node", "4", "-m", "spacy_elmo"]),
    # several machines: a c10d rendezvous with this job's id; the endpoint a placeholder, since the workers'
    # MASTER_ADDR:MASTER_PORT is a store the first agent opened on a free port (c10d), not the --rdzv-endpoint
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, ["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                                    "HOST:PORT", "--nproc-per-node", "4", "-m", "spacy_elmo"]),
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "41791", "TORCHELASTIC_RUN_ID": "job7"},
     ["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "HOST:PORT", "--rdzv-id", "job7",
      "--nproc-per-node", "4", "-m", "spacy_elmo"]),
    ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "none"},
     ["torchrun", "--nnodes", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "HOST:PORT", "--nproc-per-node", "1",
      "-m", "spacy_elmo"]),
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "node0"},  # no MASTER_PORT
     ["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "HOST:PORT", "--nproc-per-node", "4",
      "-m", "spacy_elmo"]),
    # one machine: torchrun's default (local) rendezvous, whatever it set
    ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     ["torchrun", "--nproc-per-node", "4", "-m", "spacy_elmo"]),
    ({"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "4"}, ["torchrun", "--nproc-per-node", "6", "-m", "spacy_elmo"]),  # uneven
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "x"}, ["torchrun", "--nproc-per-node", "2", "-m", "spacy_elmo"]),
    ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "0"}, ["torchrun", "--nproc-per-node", "4", "-m", "spacy_elmo"]),  # no / 0
])
def test_the_sentence_stage_command_starts_as_the_run_did(monkeypatch, tmp_path, env, start):
    """After a run under torchrun the printed command said `spacy-elmo pretrain ...`, which trains the second stage on
    one process: it starts as the README's torchrun command, with the run's processes per machine (and its machines).
    After a run on several machines it gave `--nnodes M` without the rendezvous that joins them (torchrun's default
    is local: each machine waited for the others alone): it carries torchrun's, as torchrun's own parser reads it."""
    import shlex

    import typer

    from spacy_elmo.cli.pretrain import sentence_stage
    from spacy_elmo.ranks import torchrun_ranks

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    command = typer.main.get_command(app).commands["pretrain"]
    train, out = tmp_path / "train.txt", tmp_path / "out"
    ctx = command.make_context("pretrain", [str(train), str(out), "--batch-size", "64"])
    words = shlex.split(sentence_stage(ctx, train, out, torchrun_ranks()))
    assert words == [*start, "pretrain", str(train), str(tmp_path / "out-sentences"), "--init", str(out), "--sentences",
                     "--batch-size", "64"]
    if words[0] == "torchrun":  # as torchrun itself reads it
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(words[1:])
        assert (args.module, args.training_script) == (True, "spacy_elmo")
        assert args.nproc_per_node == words[words.index("--nproc-per-node") + 1]
        assert args.training_script_args[:2] == ["pretrain", str(train)]
        multi = "--nnodes" in words
        assert (args.rdzv_backend, args.nnodes) == (("c10d", words[words.index("--nnodes") + 1]) if multi else ("static", "1:1"))
        if multi:
            assert args.rdzv_endpoint == words[words.index("--rdzv-endpoint") + 1]
            assert args.rdzv_id == env.get("TORCHELASTIC_RUN_ID", "none")


def test_the_sentence_stage_command_of_a_job_on_several_machines_asks_for_the_endpoint(tmp_path, monkeypatch):
    """The command a stream run on several machines prints has the placeholder HOST:PORT for the rendezvous
    endpoint (torchrun does not tell its workers the one they met at): a warning says to replace it."""
    summary = {"rank": 0, "steps": 5, "resumed_from": 0, "vocab_size": 9, "heldout": None, "model_written": True,
               "output_dir": str(tmp_path / "out"),
               "corpus": {"n_tokens": 10, "n_sentences": 2, "n_files": 1, "n_binary": 0, "replaced_bytes": 0}}
    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda cfg, on_step=None: summary)
    for name, value in {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0",
                        "MASTER_ADDR": "node0", "MASTER_PORT": "41791", "TORCHELASTIC_RUN_ID": "job7"}.items():
        monkeypatch.setenv(name, value)
    result = runner.invoke(app, ["pretrain", str(tmp_path / "t"), str(tmp_path / "out"), "--return-freed-memory"])
    assert result.exit_code == 0, result.output
    assert "--rdzv-endpoint HOST:PORT --rdzv-id job7" in result.stdout and "node0" not in result.stdout
    assert plain(result.stderr) == plain(Warnings.W_STAGE_RENDEZVOUS.format(placeholder="HOST:PORT")), result.stderr


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny model ``pretrain`` wrote (it records lang 'en' and spaCy's English tokenizer block) and a text:
    ``(out, train)``."""
    tmp_path = tmp_path_factory.mktemp("pretrained")
    result, train, _, _, out = pretrain_tiny(tmp_path)
    assert result.exit_code == 0, result.output
    return out, train


def _recording(model, tmp_path, **reading):
    """A copy of ``model`` whose config.json records ``reading`` (lang, tokenizer) as pretrain's provenance."""
    import shutil

    copy = tmp_path / "recorded"
    shutil.copytree(model, copy)
    config = json.loads((copy / "config.json").read_text(encoding="utf-8"))
    config["provenance"].update(reading)
    config["provenance"] = {k: v for k, v in config["provenance"].items() if v is not None}
    (copy / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return copy


ZH_CHARS = {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}
READING_CASES = {  # what the model records, the --lang given (None: none), the fix the warning names (None: silent)
    "other-lang": ({"lang": "zh", "tokenizer": ZH_CHARS}, "en", "Read it with `--lang zh`, the model's language."),
    "older-model": ({"lang": "de", "tokenizer": None}, "en", "Read it with `--lang de`"),
    "other-tokenizer": ({"lang": "en", "tokenizer": {"@tokenizers": "spacy.en.OtherTokenizer"}}, None,
                        "The tokenizer block the model records for 'en' (pretrain --tokenizer's, not spaCy's "
                        "default for it) cannot be built here: the text is read with the tokenizer the model records"),
    "same": ({}, None, None),
    "same-given": ({}, "en", None),
    # pretrained on the rule-based fallback (SudachiPy missing then): read with it, whatever is installed now, and
    # not told to install the packages; zh's rules against its default characters, which build anywhere
    "fallback-recorded": ({"lang": "ja", "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}, None, None),
    "rules-recorded": ({"lang": "zh", "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}, None, None),
    # the README's Korean fallback, as pretrain read it without mecab-ko (the rule-based block, not the default's)
    "ko-fallback": ({"lang": "ko", "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}, None, None),
    "zh-own": ({"lang": "zh", "tokenizer": ZH_CHARS}, None, None),  # read with the model's language, no --lang
    # a block of a spaCy whose tokenizer had fewer settings: built here with the default of the one it lacks, and
    # read with, so not "cannot be built here"
    "unfilled": ({"lang": "zh", "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer"}}, None, None),
    "unfilled-given": ({"lang": "zh", "tokenizer": {"@tokenizers": "spacy.zh.ChineseTokenizer"}}, "zh", None),
    # a language this spaCy lacks (E_MODEL_LANG without --lang) read with --lang en: not told `--lang qq`, refused
    "lang-missing": ({"lang": "qq", "tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}, "en",
                     "This spaCy cannot build the model's language 'qq', so no --lang reads the text as pretrain did"),
}


@pytest.mark.parametrize("case", sorted(READING_CASES))
@pytest.mark.parametrize("command", ["embed", "evaluate", "fit-state"])
def test_commands_reading_text_warn_of_other_tokens_than_the_models(pretrained, tmp_path, command, case):
    """embed, evaluate and fit-state never compared the model's recorded language and tokenizer (config.json's
    provenance) with the ones they read the text with: a Chinese model of characters embedded English tokens, a
    Japanese one pretrained on the fallback tokenizer's phrases evaluated SudachiPy's words, without a word."""
    model, text = pretrained
    reading, lang, fix = READING_CASES[case]
    model = _recording(model, tmp_path, **reading) if reading else model
    args = {"embed": ["embed", str(text), str(tmp_path / "v.h5"), "--model", str(model)],
            "evaluate": ["evaluate", str(model), str(text)],
            "fit-state": ["fit-state", str(model), str(text), "--rows", "4"]}[command]
    args += ["--no-progress"] + (["--lang", lang] if lang else [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    said = [str(w.message) for w in caught if "pretrained on the tokens" in str(w.message)]
    assert len(said) == int(fix is not None), said
    assert not [w for w in caught if "needs packages that are not installed" in str(w.message)]
    if fix is not None:
        read = lang or reading["lang"]
        assert said[0].startswith(f"spacy-elmo: {model} was pretrained on the tokens of spaCy's {reading['lang']!r}")
        assert f"but {text} is read with spaCy's {read!r} tokenizer" in said[0] and fix in said[0]
        older = "tokenizer (its settings were not recorded: an older model), but"
        assert (older in said[0]) == (reading.get("tokenizer") is None), said[0]
        assert "`--lang qq`" not in said[0]


@pytest.mark.parametrize("command", ["embed", "evaluate", "fit-state"])
def test_a_recorded_language_this_spacy_lacks_is_said_to_come_from_the_model(pretrained, tmp_path, command):
    """A model pretrained with another spaCy (its language unknown here) read without --lang was refused with
    "Could not create a spaCy tokenizer for --lang 'qq'", though no --lang was given: the refusal says the model's
    config.json named it and what to pass instead."""
    model, text = pretrained
    model = _recording(model, tmp_path, lang="qq", tokenizer={"@tokenizers": "spacy.Tokenizer.v1"})
    args = {"embed": ["embed", str(text), str(tmp_path / "v.h5"), "--model", str(model)],
            "evaluate": ["evaluate", str(model), str(text)],
            "fit-state": ["fit-state", str(model), str(text), "--rows", "4"]}[command]
    result = runner.invoke(app, args + ["--no-progress"])
    said = plain(result.output)
    assert result.exit_code == 1, said
    assert "The model's config.json records language 'qq'" in said and "for --lang" not in said
    assert "--lang LANG names a language this spaCy has (embed also takes --whitespace" in said


def _rows(path):
    import h5py

    with h5py.File(path, "r") as f:
        return [f[str(i)].shape[-2] for i in range(len(f) - 1)]


def test_a_recorded_block_reads_only_the_language_of_a_model_pretrain_recorded_it_for(pretrained, tmp_path):
    """The tokenizer block a model records is what pretrain read ITS language with: embed --lang en on a model of
    Chinese characters reads English words (not characters, with zh's block on English), and a model spacy-elmo did
    not pretrain (no trained_by) is read with its language's own tokenizer, whatever block it records."""
    import shutil

    english, chinese = tmp_path / "en.txt", tmp_path / "zh.txt"
    english.write_text("tea please\n", encoding="utf-8")
    chinese.write_text("我喜欢茶\n", encoding="utf-8")
    zh_chars = shutil.move(_recording(pretrained[0], tmp_path, lang="zh", tokenizer=ZH_CHARS), tmp_path / "zh_chars")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the other-tokens warning, tested elsewhere
        result = runner.invoke(app, ["embed", str(english), str(tmp_path / "en.h5"), "--model", str(zh_chars),
                                     "--lang", "en", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert _rows(tmp_path / "en.h5") == [2]  # tea, please
    rules = {"@tokenizers": "spacy.Tokenizer.v1"}  # zh: the whole line one token
    for trained_by, rows in (("spacy-elmo pretrain", [1]), ("someone else", [4])):
        model = shutil.move(_recording(pretrained[0], tmp_path, lang="zh", tokenizer=rules, trained_by=trained_by),
                            tmp_path / trained_by.replace(" ", "_"))
        out = tmp_path / f"{model.name}.h5"
        result = runner.invoke(app, ["embed", str(chinese), str(out), "--model", str(model), "--no-progress"])
        assert result.exit_code == 0, result.output
        assert _rows(out) == rows, trained_by


def test_embed_reads_with_the_models_language_unless_told(pretrained, tmp_path):
    """embed without --lang split every line at whitespace: a model of Chinese characters read each line of
    Chinese as one token (cut at its longest). It now reads as evaluate and fit-state do, with the language the
    model records; --whitespace splits at whitespace (text already tokenized), and with --lang is a usage error."""
    model = _recording(pretrained[0], tmp_path, lang="zh", tokenizer=ZH_CHARS)
    text = tmp_path / "zh.txt"
    text.write_text("我们今天去北京。\n你好 世界\n", encoding="utf-8")
    result = runner.invoke(app, ["embed", str(text), str(tmp_path / "own.h5"), "--model", str(model), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert _rows(tmp_path / "own.h5") == [8, 4]  # characters, as pretrain --lang zh read them
    result = runner.invoke(app, ["embed", str(text), str(tmp_path / "ws.h5"), "--model", str(model), "--whitespace",
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    assert _rows(tmp_path / "ws.h5") == [1, 2]
    result = runner.invoke(app, ["embed", str(text), str(tmp_path / "both.h5"), "--model", str(model), "--whitespace",
                                 "--lang", "zh"])
    assert result.exit_code == 2 and "--whitespace splits the lines at whitespace and --lang zh" in plain(result.output)
    assert not (tmp_path / "both.h5").exists()


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("command", ["embed", "evaluate", "fit-state"])
def test_the_tokenizer_fallback_says_where_the_language_came_from(pretrained, tmp_path, monkeypatch, command, given):
    """A model recording 'ja' read without --lang, SudachiPy missing: the fallback's warning said "spaCy's tokenizer
    for --lang ja", though no --lang was given. It names the model's config.json then, and --lang ja where given."""
    import spacy

    from spacy_elmo.training import data

    model, text = pretrained
    model = _recording(model, tmp_path, lang="ja", tokenizer=None)  # an older model: its language alone
    real = spacy.blank

    def blank(lang, config=None, **kwargs):  # SudachiPy missing: spaCy's ja tokenizer needs it
        if lang == "ja" and not config:
            raise ImportError('The Japanese tokenizer ("spacy.ja.JapaneseTokenizer") requires SudachiPy')
        return real(lang, config=config, **kwargs)

    monkeypatch.setattr(spacy, "blank", blank)
    monkeypatch.setattr(data, "_FALLBACK_WARNED", set())
    args = {"embed": ["embed", str(text), str(tmp_path / "v.h5"), "--model", str(model)],
            "evaluate": ["evaluate", str(model), str(text)],
            "fit-state": ["fit-state", str(model), str(text), "--rows", "4"]}[command]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(app, args + ["--no-progress"] + (["--lang", "ja"] if given else []))
    assert result.exit_code == 0, result.output
    (said,) = [str(w.message) for w in caught if "needs packages that are not installed" in str(w.message)]
    language = (Warnings.W_FALLBACK_LANG_GIVEN if given else Warnings.W_FALLBACK_LANG_RECORDED).format(lang="ja")
    assert said.startswith(f"spacy-elmo: spaCy's tokenizer for {language} needs packages"), said
    assert ("for --lang ja " in said) == given and ("config.json" in said) != given, said
    # which tokens the model learnt is unknown: no pipeline is told to read the fallback's ones (pretrain's advice)
    assert said.endswith(Warnings.W_FALLBACK_ADVICE_UNRECORDED.format(lang="ja")), said
    assert "spacy.Tokenizer.v1" not in said, said


@pytest.mark.parametrize("sizes", [{"projection_dim": 10**20}, {"cell_dim": 2**61}])
def test_pretrain_refuses_sizes_torch_cannot_hold_before_reading_the_corpus(tmp_path, sizes):
    """r45: `--options` with {"projection_dim": 10**20} passed, pretrain tokenized the whole corpus, then died with
    torch's "Overflow when unpacking long long" and a C++ traceback, leaving OUTPUT_DIR/data behind. A usage error
    now, naming the size, before OUTPUT_DIR is made."""
    train = write_corpus(tmp_path / "train.txt", 20)
    options = tmp_path / "options.json"
    options.write_text(json.dumps(sizes))
    out = tmp_path / "out"
    result = runner.invoke(app, ["pretrain", str(train), str(out), "--options", str(options), "--no-progress"])
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    name = next(iter(sizes))
    assert "Invalid value for '--options'" in said and "These sizes make a biLM of" in said, said
    assert f"at most its default: {name}=" in said and "Traceback" not in said and "Overflow" not in said, said
    assert not out.exists()


def test_a_bad_value_in_options_of_bilmconfig_fields_says_to_fix_it_there(tmp_path):
    """A size (or any value) BiLMConfig refuses in a JSON object of BiLMConfig fields, or in a spacy-elmo model's
    config.json, ended with "Pass an AllenNLP options.json, a spacy-elmo model's config.json ... or a JSON object of
    BiLMConfig fields": advice for a file of the wrong kind, given one of the right kind. It names the key to fix."""
    options = tmp_path / "options.json"
    options.write_text(json.dumps({"cell_dim": 2**61}))
    BiLM(BiLMConfig(**TINY)).save(tmp_path / "model")
    meta = json.loads((tmp_path / "model" / "config.json").read_text())
    meta["config"]["cell_dim"] = 2**61
    (tmp_path / "model" / "config.json").write_text(json.dumps(meta))
    for given, path, key in [(options, options, "cell_dim"), (tmp_path / "model", tmp_path / "model" / "config.json",
                                                               "config.cell_dim")]:
        result = runner.invoke(app, ["pretrain", str(tmp_path / "no-text"), str(tmp_path / "out"), "--options", str(given)])
        said = " ".join(plain(result.output).replace("│", " ").split())
        assert result.exit_code == 2, said
        squeezed = said.replace(" ", "")  # a long path is wrapped anywhere in the error box
        assert f"Invalidvaluefor'--options':Themodeloptions{path}haveaninvalid{key}:Thesesizesmake" in squeezed, said
        assert said.rstrip("╰─╯ ").endswith(f"Fix {key} there."), said
        assert "Pass an AllenNLP" not in said and "Could not read" not in said, said
