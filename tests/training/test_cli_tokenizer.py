"""``pretrain --tokenizer FILE``: the text read with a spaCy config's ``[nlp.tokenizer]`` block instead of
``spacy.blank(--lang)``'s, recorded in the model, and read (embed) or checked (the elmo component) with it."""

import importlib.util
import json
import shutil
import warnings

import pytest
import spacy

from spacy_elmo.cli import app
from spacy_elmo.errors import TokenizerMismatchWarning, Warnings
from spacy_elmo.training import data
from spacy_elmo.training.data import RULE_BASED
from tests.cli_text import mixed_runner as runner, plain

from .conftest import tiny_pretrain_args


#: spaCy's Chinese tokenizer of spacy.blank("zh"): characters
ZH_CHARS = {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "char"}


def tokenizer_file(path, block_lines, lang="zh"):
    """A spaCy config file at ``path``: ``[nlp]`` (with ``lang`` unless None) and ``[nlp.tokenizer]`` of the
    ``key = value`` lines ``block_lines``."""
    head = "[nlp]\n" + (f'lang = "{lang}"\n' if lang else "")
    path.write_text(head + "\n[nlp.tokenizer]\n" + "\n".join(block_lines) + "\n", encoding="utf-8")
    return path


def rule_based_file(tmp_path, lang="zh"):
    return tokenizer_file(tmp_path / "rules.cfg", ['@tokenizers = "spacy.Tokenizer.v1"'], lang)


def other_tokens(run) -> list:
    """The messages of the TokenizerMismatchWarnings that ``run()`` gives, and its result."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run()
    return [str(w.message) for w in caught if issubclass(w.category, TokenizerMismatchWarning)], result


def test_a_tokenizer_block_reads_the_corpus_is_recorded_and_read_and_checked_with(tmp_path):
    """pretrain --lang zh --tokenizer (the rule-based block, not zh's characters): the corpus (by tokenizing worker
    processes), the held-out text and the model's record take that block; embed without --lang reads with it, silently;
    an elmo component warns in spacy.blank("zh") (characters) and not in a pipeline of that block."""
    out = tmp_path / "model"
    held = tmp_path / "held.txt"
    held.write_text("the cat sees a fish .\n", encoding="utf-8")
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--lang", "zh", "--tokenizer", str(rule_based_file(tmp_path)),
                                    "--tokenize-processes", "2", "--heldout", str(held))
    said, result = other_tokens(lambda: runner.invoke(app, args))
    assert result.exit_code == 0, result.output
    assert not said
    provenance = json.loads((out / "config.json").read_text(encoding="utf-8"))["provenance"]
    assert provenance["lang"] == "zh" and provenance["tokenizer"] == RULE_BASED
    words = set((out / "vocab.txt").read_text(encoding="utf-8").split("\n"))
    assert {"teacher", "garden"} <= words  # whole words: zh's characters would give t, e, a...
    # the stage-2 command reads as this run did
    assert f"--lang zh --tokenizer {tmp_path / 'rules.cfg'}" in plain(result.stdout)

    text = tmp_path / "zh.txt"
    text.write_text("我喜欢茶 你好\n", encoding="utf-8")
    said, result = other_tokens(lambda: runner.invoke(
        app, ["embed", str(text), str(tmp_path / "v.h5"), "--model", str(out), "--no-progress"]))
    assert result.exit_code == 0, result.output
    assert not said
    import h5py

    with h5py.File(tmp_path / "v.h5", "r") as f:
        assert f["0"].shape[-2] == 2  # the two phrases between spaces, not six characters

    blank = spacy.blank("zh")
    blank.add_pipe("elmo", config={"weights": str(out)})
    said, _ = other_tokens(lambda: blank("我喜欢茶"))
    assert len(said) == 1 and "'@tokenizers': 'spacy.Tokenizer.v1'" in said[0] and "'segmenter': 'char'" in said[0]
    same = spacy.blank("zh", config={"nlp": {"tokenizer": RULE_BASED}})
    same.add_pipe("elmo", config={"weights": str(out)})
    said, doc = other_tokens(lambda: same("我喜欢茶 你好"))
    assert not said and len(doc) == 2


@pytest.mark.parametrize("case", ["missing", "directory", "not-a-config", "child-first", "no-section", "no-nlp-section", "other-lang",
                                  "nested", "no-function", "two-functions", "unknown-function", "bad-setting",
                                  "cannot-read"])
def test_a_tokenizer_file_that_cannot_be_read_with_is_a_usage_error_naming_it(tmp_path, case):
    """Every refusal is a usage error (exit 2) of --tokenizer before OUTPUT_DIR is made, saying what is wrong."""
    path = tmp_path / "tok.cfg"
    lang = "zh"
    if case == "missing":
        expected = "--tokenizer {path} does not exist"
    elif case == "directory":
        path.mkdir()
        expected = "could not be read as a spaCy config file"
    elif case == "not-a-config":
        path.write_text('{"@tokenizers": "spacy.Tokenizer.v1"}\n', encoding="utf-8")
        expected = "could not be read as a spaCy config file: "
    elif case == "child-first":  # spaCy's reader failed with a bare KeyError: 'nlp'
        path.write_text('[nlp.tokenizer]\n@tokenizers = "spacy.Tokenizer.v1"\n\n[nlp]\nlang = "zh"\n', encoding="utf-8")
        expected = ("could not be read as a spaCy config file: a section under [nlp] (e.g. [nlp.tokenizer] under [nlp]) "
                    "comes before the section it belongs to")
    elif case == "no-section":
        path.write_text('[nlp]\nlang = "zh"\n', encoding="utf-8")
        expected = "has no [nlp.tokenizer] section (its sections: [nlp])"
    elif case == "no-nlp-section":  # the [nlp] read into it is not one of its sections
        path.write_text('[paths]\ntrain = null\n', encoding="utf-8")
        expected = "has no [nlp.tokenizer] section (its sections: [paths])"
    elif case == "other-lang":
        rule_based_file(tmp_path, "ja").rename(path)
        expected = "is a config of language 'ja' ([nlp] lang), but the text is read as --lang 'zh'"
        expected += ": its tokenizer block was written for another language. Pass --lang ja"
    elif case == "nested":
        tokenizer_file(path, ['@tokenizers = "spacy.Tokenizer.v1"', "", "[nlp.tokenizer.rules]",
                              '@misc = "spacy.LookupsDataLoader.v1"', 'lang = "zh"', 'tables = ["x"]'])
        expected = "is not one registered tokenizer function with plain settings"
    elif case == "no-function":
        tokenizer_file(path, ['segmenter = "char"'])
        expected = "is not one registered tokenizer function with plain settings"
    elif case == "two-functions":
        tokenizer_file(path, ['@tokenizers = "spacy.Tokenizer.v1"', '@misc = "spacy.LookupsDataLoader.v1"'])
        expected = "is not one registered tokenizer function with plain settings"
    elif case == "unknown-function":
        tokenizer_file(path, ['@tokenizers = "no.such.Tokenizer.v1"'])
        expected = "cannot be built for --lang zh: [E893] Could not find function 'no.such.Tokenizer.v1'"
    elif case == "cannot-read":  # builds, then fails on its first text: pkuseg's model needs an initialize step
        tokenizer_file(path, ['@tokenizers = "spacy.zh.ChineseTokenizer"', 'segmenter = "pkuseg"'])
        expected = ("builds for --lang zh but cannot read a word: [E1000] The Chinese word segmenter is pkuseg but no "
                    "pkuseg model")
    else:
        tokenizer_file(path, ['@tokenizers = "spacy.zh.ChineseTokenizer"', 'segmenter = "words"'])
        expected = "cannot be built for --lang zh: Config error for 'spacy.zh.ChineseTokenizer' tokenizer -> segmenter"
    out = tmp_path / "out"
    args, _, _ = tiny_pretrain_args(tmp_path, out, "--lang", lang, "--tokenizer", str(path))
    result = runner.invoke(app, args)
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    assert "Invalid value for '--tokenizer'" in said and expected.format(path=path) in said, said
    assert not out.exists()
    if case in ("missing", "no-section"):  # the example block as a file's lines, each on its own in rich's panel
        rows = [row.replace("│", "").strip() for row in result.output.splitlines()]
        assert rows[rows.index("[nlp.tokenizer]") + 1:][:2] == ['@tokenizers = "spacy.zh.ChineseTokenizer"',
                                                                'segmenter = "jieba"'], rows


@pytest.mark.parametrize("lang, block, package", [
    ("zh", ['@tokenizers = "spacy.zh.ChineseTokenizer"', 'segmenter = "jieba"'], "jieba"),
    ("ja", ['@tokenizers = "spacy.ja.JapaneseTokenizer"'], "sudachipy"),
])
def test_a_block_whose_package_is_missing_is_refused_not_replaced_by_the_fallback(tmp_path, lang, block, package):
    """make_nlp reads a language whose tokenizer needs a missing package with the rule-based fallback, warning; a
    block given with --tokenizer is refused instead, naming the package (the user asked for that tokenizer)."""
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    path = tokenizer_file(tmp_path / "tok.cfg", block, lang)
    args, _, _ = tiny_pretrain_args(tmp_path, tmp_path / "out", "--lang", lang, "--tokenizer", str(path))
    result = runner.invoke(app, args)
    said = " ".join(plain(result.output).replace("│", " ").split())
    assert result.exit_code == 2, said
    assert f"cannot be built for --lang {lang}: a package it needs is missing (" in said
    assert package.lower() in said.lower() and "never replaced by spaCy's rule-based tokenizer" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("lines, block", [
    (['@tokenizers = "spacy.Tokenizer.v1"'], RULE_BASED),
    (['@tokenizers = "spacy.zh.ChineseTokenizer"'], ZH_CHARS),  # the default of the setting left out filled in
    (['@tokenizers = "spacy.zh.ChineseTokenizer"', 'segmenter = "${vars.segmenter}"', "", "[vars]",
      'segmenter = "char"'], ZH_CHARS),  # interpolated, as spaCy reads a config
])
def test_a_file_of_the_tokenizer_block_alone_is_read(tmp_path, lines, block):
    """The files the messages show (W_ELMO_PRETRAIN_AGAIN_TOKENIZER, W_READ_AGAIN_TOKENIZER: "tokenizer.cfg holding
    its block: [nlp.tokenizer] ...") have no [nlp] section, which spaCy's config reader refused (the parent of
    [nlp.tokenizer] missing): read as if it began with an empty one."""
    path = tmp_path / "tokenizer.cfg"
    path.write_text("[nlp.tokenizer]\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert data.read_tokenizer_config(path, "zh") == block
    # the file the messages show, as lines (on one line, pasted into a file, it was no config): it reads back
    shown = Warnings.W_READ_AGAIN_LINES.format(tokenizer_cfg=data.tokenizer_cfg(block))
    assert (shown + "\n").startswith(f"\n[nlp.tokenizer]\n{lines[0]}\n")
    pasted = tmp_path / "pasted.cfg"
    pasted.write_text(shown, encoding="utf-8")
    assert data.read_tokenizer_config(pasted, "zh") == block


@pytest.mark.parametrize("lang, block, package", [
    ("zh", {"@tokenizers": "spacy.zh.ChineseTokenizer", "segmenter": "jieba"}, "jieba"),  # pretrain --tokenizer's
    ("ja", {"@tokenizers": "spacy.ja.JapaneseTokenizer", "split_mode": None}, "sudachipy"),  # ja's default
])
def test_a_recorded_block_that_cannot_be_built_is_named_and_the_fix_reads_what_is_read(monkeypatch, lang, block,
                                                                                       package):
    """embed, evaluate, fit-state of a model whose recorded block needs a missing package: the text is read with the
    rule-based fallback. The warnings said zh's tokenizer needed packages (zh's default needs none: the recorded
    jieba block does), that a pipeline must read the fallback's tokens (the model learnt jieba's words), and to
    pretrain again with --lang zh (characters, not the fallback's tokens read here)."""
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    monkeypatch.setattr(data, "_FALLBACK_WARNED", set())
    provenance = {"trained_by": data.PRETRAINED_BY, "lang": lang, "tokenizer": block}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp = data.make_nlp(lang, provenance, from_model=True)
        data.warn_other_tokens(provenance, "MODEL", nlp, lang, "text.txt")
    (fallback,) = [str(w.message) for w in caught if "needs packages that are not installed" in str(w.message)]
    (other,) = [str(w.message) for w in caught if issubclass(w.category, TokenizerMismatchWarning)]
    assert data.tokenizer_settings(nlp) == RULE_BASED
    # the model learnt the recorded block's tokens: no pipeline is told to read the fallback's
    assert "spacy.blank(" not in fallback and "install those packages to read the text as pretrain read" in fallback
    if lang == "zh":
        assert fallback.startswith(f"spacy-elmo: the tokenizer block the model's config.json records for 'zh', {json.dumps(block)}")
        assert "spaCy's tokenizer for zh" not in fallback
        # --lang zh reads characters here, not the rule-based tokens read: pretrain --tokenizer with those
        assert data.reading_tokenizer_settings("zh") != RULE_BASED and "--lang zh`" not in other
        assert ("(`spacy-elmo pretrain TEXT OUT_DIR --lang zh --tokenizer tokenizer.cfg`, tokenizer.cfg holding the "
                f"lines below).\n{data.tokenizer_cfg(RULE_BASED)}") in other
        assert other.endswith('\n[nlp.tokenizer]\n@tokenizers = "spacy.Tokenizer.v1"'), other
    else:  # the default of ja: said as before, and --lang ja reads the fallback's tokens here too
        assert fallback.startswith("spacy-elmo: spaCy's tokenizer for ja, the language the model's config.json records")
        assert data.reading_tokenizer_settings("ja") == RULE_BASED
        assert "(`spacy-elmo pretrain TEXT OUT_DIR --lang ja`)." in other and "tokenizer.cfg" not in other


@pytest.mark.parametrize("block", [None, RULE_BASED])
def test_the_held_out_text_and_the_corpus_are_read_with_one_build_of_the_pipeline(tmp_path, monkeypatch, block):
    """train built the pipeline (make_nlp: spacy.blank, the block's tokenizer, jieba's dictionary) once for the
    held-out text and again for the corpus: one build reads both, and both are read with it."""
    from spacy_elmo.training.trainer import train

    from .conftest import tiny_train_config, write_corpus

    built, make_nlp = [], data.make_nlp

    def counted(*args, **kwargs):
        built.append(make_nlp(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(data, "make_nlp", counted)
    train_file, held = write_corpus(tmp_path / "train.txt", 40), write_corpus(tmp_path / "held.txt", 5, seed=1)
    out = tmp_path / "out"
    train(tiny_train_config(train_file, out, max_steps=2, checkpoint_every=2, heldout=str(held), lang="zh",
                            tokenizer=block))
    assert len(built) == 1 and data.tokenizer_settings(built[0]) == (block or ZH_CHARS)
    meta = json.loads((out / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta["tokenizer"] == (block or ZH_CHARS)


def test_a_train_config_of_a_block_that_is_none_is_refused_before_output_dir_is_made(tmp_path):
    """The Python API's TrainConfig.tokenizer: a block a model cannot record is refused by validate."""
    from spacy_elmo.training.trainer import TrainConfig, train

    cfg = TrainConfig(train_path=str(tmp_path / "t.txt"), output_dir=str(tmp_path / "out"), lang="zh",
                      tokenizer={"segmenter": "char"})
    with pytest.raises(ValueError, match=r"\(TrainConfig.tokenizer\) is not one registered tokenizer function"):
        train(cfg)
    assert not (tmp_path / "out").exists()


def spaced_characters(path):
    """A corpus of Chinese characters between spaces: zh's characters and the rule-based block read the same
    tokens of it (so the corpus digest cannot tell the two apart)."""
    lines = ["我 喜 欢 茶 。", "你 好 世 界 。", "我 们 今 天 去 北 京 。"] * 40
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("first, then, refused", [
    ("rules", None, True),
    (None, "rules", True),
    ("older", "rules", True),  # a checkpoint of a spacy-elmo from before --tokenizer: it records none
    ("older", None, False),
    ("rules", "copy", False),  # another file of the same block
    (None, "default", False),  # zh's own block given: the tokens of no --tokenizer
])
def test_a_resume_must_keep_the_tokenizer_block(tmp_path, first, then, refused):
    """A run resumed with another --tokenizer (or none where it had one, or one where it had none) is refused before
    the corpus is read, naming both, even where the text's tokens are the same with both (the model would record
    another tokenizer than its first steps read with)."""
    import torch

    from spacy_elmo.training.checkpoint import checkpoint_path

    files = {"rules": rule_based_file(tmp_path),
             "copy": shutil.copy(rule_based_file(tmp_path), tmp_path / "copy.cfg"),
             "default": tokenizer_file(tmp_path / "default.cfg", ['@tokenizers = "spacy.zh.ChineseTokenizer"'])}
    out = tmp_path / "out"

    def run(tokenizer, *extra, max_steps):
        given = ["--tokenizer", str(files[tokenizer])] if tokenizer else []
        args, _, _ = tiny_pretrain_args(tmp_path, out, "--lang", "zh", *given, *extra, max_steps=max_steps)
        args[1] = str(spaced_characters(tmp_path / "chars.txt"))
        return runner.invoke(app, args)

    result = run(None if first == "older" else first, max_steps=2)
    assert result.exit_code == 0, result.output
    if first == "older":
        payload = torch.load(checkpoint_path(out), weights_only=True)
        del payload["settings"]["tokenizer"]
        torch.save(payload, checkpoint_path(out))
        first = None
    result = run(then, "--resume", max_steps=3)
    said = " ".join(plain(result.output).split())
    if not refused:
        assert result.exit_code == 0, said
        assert "trained to step 3 (1 step this run)" in said
        return
    assert result.exit_code == 1, said
    given = '--tokenizer of the [nlp.tokenizer] block {"@tokenizers": "spacy.Tokenizer.v1"}'
    unset = "no --tokenizer (spaCy's tokenizer of --lang)"
    found, expected = (given, unset) if first else (unset, given)
    assert f"The checkpoint in {out} was written with {found}, but this run uses {expected}." in said
    provenance = json.loads((out / "config.json").read_text(encoding="utf-8"))["provenance"]
    assert provenance["steps"] == 2 and provenance["tokenizer"] == (RULE_BASED if first else ZH_CHARS)


def test_init_fine_tunes_with_another_block_as_with_another_lang(tmp_path):
    """--init of a model read with zh's characters, fine-tuned with --tokenizer of the rule-based block: accepted
    without a word, as --init with another --lang is (adapting a model to other tokens is a choice), and the new
    model records the block its text was read with."""
    base = tmp_path / "base"
    args, _, _ = tiny_pretrain_args(tmp_path, base, "--lang", "zh")
    assert runner.invoke(app, args).exit_code == 0
    assert json.loads((base / "config.json").read_text(encoding="utf-8"))["provenance"]["tokenizer"] == ZH_CHARS
    tuned = tmp_path / "tuned"
    args = ["pretrain", str(tmp_path / "train.txt"), str(tuned), "--init", str(base), "--lang", "zh", "--tokenizer",
            str(rule_based_file(tmp_path)), "--max-steps", "2", "--batch-size", "4", "--unroll", "5", "--negatives",
            "8", "--threads", "1", "--backend", "reference", "--no-progress"]
    said, result = other_tokens(lambda: runner.invoke(app, args))
    assert result.exit_code == 0, result.output
    assert not said
    provenance = json.loads((tuned / "config.json").read_text(encoding="utf-8"))["provenance"]
    assert provenance["tokenizer"] == RULE_BASED and provenance["init"] == str(base)
