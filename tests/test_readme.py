"""The README and docs/*.md as a new user reads them: their code must still run and their commands parse.

* Every ```python block runs, in a fresh namespace and a temporary working directory that holds the
  files the blocks name as the user's own (``options.json`` + ``weights.hdf5``: AllenNLP files of a
  tiny random biLM; ``my_model_dir``: the same biLM saved with ``BiLM.save``). A comment line
  ``# or EXPR, EXPR`` in a block names alternatives: each is evaluated after the block. ``CLAIMS`` checks
  what a block's comments say it returns.
* Every ``spacy-elmo CMD ...`` line of a code block is parsed by that command (typer's own parser and
  the options' callbacks, nothing run): a renamed option, a removed argument or a value the command
  refuses fails. ``spacy-elmo CMD`` in an inline code span and every other ``--flag`` of the text must
  name an option of that command, of some spacy-elmo command, or of the tool a command line runs.
* ``python benchmarks/X.py --flag`` lines name options of that script; ``spacy train X.cfg --a.b`` lines
  name settings of the shipped config X.
* Relative links, their anchors, and repository paths in backticks exist; so do a file name in backticks
  without its directory (a benchmark result ``pretrain_cpu_b128.json``) and a name of code (``read_log()``,
  ``TOKENIZE_TIMEOUT``, ``Errors.E_...``) or of a result directory (``textcat_s4*``).

A block that cannot run here is marked in the Markdown by ``<!-- readme-test: skip (reason) -->`` on the
line before its opening fence; nothing is skipped silently.
"""

import ast
import fnmatch
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple

import pytest

from spacy_elmo import errors

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((.+)\)\s*-->")
#: ``--flag``, and spaCy's ``--section.key_name`` config overrides (a key can hold an underscore)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9._-]*[a-z0-9]")


class Block(NamedTuple):
    path: Path
    line: int  # 1-based line number of the block's first line of code
    lang: str
    text: str
    skip: Optional[str]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def code_blocks(path: Path) -> List[Block]:
    """The fenced code blocks of a Markdown file, with the skip marker (if any) before each."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(before)
        blocks.append(Block(path, i + 2, fence.group(2), "\n".join(lines[i + 1 : end]), marker.group(1) if marker else None))
        i = end + 1
    return blocks


def prose(path: Path) -> str:
    """The file's text with its code blocks blanked (line numbers kept)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    inside = False
    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            inside = not inside
            lines[i] = ""
        elif inside:
            lines[i] = ""
    return "\n".join(lines)


def inline_spans(path: Path) -> List[str]:
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose(path))]


BLOCKS = [block for path in DOCS for block in code_blocks(path)]
PYTHON = [block for block in BLOCKS if block.lang == "python"]
SHELL = [block for block in BLOCKS if block.lang in ("bash", "sh", "shell", "console")]


def test_skip_markers_sit_right_before_a_block(tmp_path):
    """A marker is read from the line before a fence (blank lines between allowed); one anywhere else is an error."""
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if SKIP.search(line):
                after = next((rest for rest in lines[i + 1 :] if rest.strip()), "")
                assert after.lstrip().startswith("```"), f"{path.name}:{i + 1}: a skip marker not before a code block"
    sample = tmp_path / "sample.md"
    sample.write_text("<!-- readme-test: skip (needs a GPU) -->\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n")
    assert [(b.line, b.lang, b.text, b.skip) for b in code_blocks(sample)] == [(4, "python", "x = 1", "needs a GPU"), (8, "bash", "ls", None)]



# --- the python blocks ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """The files a block names as the user's own: a tiny random biLM as AllenNLP files and as BiLM.save."""
    import torch

    from spacy_elmo import BiLM, BiLMConfig

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("readme-user-files")
    bilm = BiLM(BiLMConfig(projection_dim=8, cell_dim=16, filters=[[1, 4], [2, 4]]), backend="reference")
    bilm.to_allennlp(path / "options.json", path / "weights.hdf5")
    bilm.save(path / "my_model_dir")
    return path


def alternatives(block: Block) -> List[str]:
    """The expressions of the block's ``# or A, B, C`` lines (whole-line comments)."""
    found = []
    for line in block.text.splitlines():
        comment = re.match(r"^\s*#\s*or\s+(.+)$", line)
        if comment:
            try:
                tree = ast.parse(comment.group(1), mode="eval").body
            except SyntaxError:
                pytest.fail(f"{block.where}: `{line.strip()}` is no `# or EXPR, EXPR` line of Python alternatives")
            found += [ast.unparse(e) for e in tree.elts] if isinstance(tree, ast.Tuple) else [ast.unparse(tree)]
    return found


def _api_block(ns: Dict) -> None:
    """The Python API block: BiLMOutput(activations=[(batch, max_len, 2P)] * (L + 1), mask=(batch, max_len)),
    the mix (batch, max_len, 2P), and files that load back as the same model."""
    import torch

    from spacy_elmo import BiLM

    bilm, ids, out, elmo = ns["bilm"], ns["ids"], ns["out"], ns["elmo"]
    batch, max_len = ids.shape[:2]
    assert tuple(ids.shape) == (2, 5, 50)
    width = 2 * bilm.config.projection_dim
    assert len(out.activations) == bilm.config.n_layers + 1 == bilm.config.n_output_layers
    assert all(tuple(a.shape) == (batch, max_len, width) for a in out.activations)
    assert tuple(out.mask.shape) == (batch, max_len) and out.mask.sum().item() == 5 + 2
    assert tuple(elmo.shape) == (batch, max_len, width)
    assert sorted(p.name for p in Path("my_model_dir").iterdir()) == ["config.json", "model.safetensors"]
    for again in (BiLM.load("my_model_dir"), BiLM.from_allennlp("options.json", "weights.hdf5")):
        with torch.no_grad():
            torch.testing.assert_close(again(ids).activations[-1], out.activations[-1], rtol=1e-5, atol=1e-6)


def _spacy_block(ns: Dict) -> None:
    """The spaCy block: all L + 1 layers in float16, token 4 is "bank" in both docs, a float similarity."""
    import numpy

    doc, other = ns["doc"], ns["other"]
    assert doc[4].text == other[4].text == "bank"
    assert doc._.elmo.dtype == numpy.float16 and doc._.elmo.shape[:2] == (3, len(doc))  # tiny biLM: L = 2
    assert doc[4]._.elmo_vector.shape == (doc._.elmo.shape[2],)
    assert doc[3:5]._.elmo_vector.shape == doc[4]._.elmo_vector.shape
    assert isinstance(doc[4].similarity(other[4]), float) and doc[4].has_vector


def _migration_block(ns: Dict) -> None:
    """The AllenNLP migration block: AllenNLP's dict of (B, T, D) representations and (B, T) mask, and
    0.9's float32 (3, n, D) array, D the model's output width (1024 for the original ELMo)."""
    import numpy

    out, vectors, width = ns["out"], ns["vectors"], ns["elmo"].get_output_dim()
    assert sorted(out) == ["elmo_representations", "mask"] and len(out["elmo_representations"]) == 2
    assert all(tuple(r.shape) == (2, 3, width) for r in out["elmo_representations"])
    assert out["mask"].tolist() == [[True, True, True], [True, True, False]]
    assert vectors.dtype == numpy.float32 and vectors.shape == (3, 4, width)


#: What the comments of a block say it returns, keyed by a line of that block.
CLAIMS = {
    "out = bilm(ids)": _api_block,
    'nlp.add_pipe("elmo", config={"weights": "my_model_dir"})': _spacy_block,
    "out = elmo(batch_to_ids(sentences))": _migration_block,
}


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_python_block_runs(block, user_files, tmp_path, monkeypatch):
    if block.skip:
        pytest.skip(f"{block.where}: {block.skip}")
    for item in user_files.iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy)(item, tmp_path / item.name)
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__readme__"}
    # Padding keeps the traceback's line numbers those of the Markdown file.
    exec(compile("\n" * (block.line - 1) + block.text, str(block.path), "exec"), ns)
    for expression in alternatives(block):
        assert eval(expression, ns) is not None, expression
    for key, check in CLAIMS.items():
        if key in block.text:
            check(ns)


def test_the_first_python_block_runs_without_files_of_the_users_own(tmp_path, monkeypatch):
    """The README's first Python block opened with BiLM.from_allennlp("options.json", "weights.hdf5"), files a new
    user does not have (FileNotFoundError as pasted): it runs in an empty directory, on the bundled model."""
    block = next(b for b in PYTHON if b.path.name == "README.md")
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__readme__"}
    with pytest.warns(UserWarning, match="AllenNLP/bilm-tf files have no place"):  # said by its comment
        exec(compile("\n" * (block.line - 1) + block.text, str(block.path), "exec"), ns)
    assert ns["bilm"].provenance.get("reading") == "sentences"  # the bundled model


def test_the_contents_link_every_section():
    """The README's contents line (near the top) links every ``## `` section."""
    text = prose(ROOT / "README.md")
    contents = next(line for line in text.split("\n\n") if line.startswith("Contents: "))
    linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
    sections = {github_anchor(h) for h in re.findall(r"^##\s+(.+)$", text, re.M)}
    assert sections <= linked, sorted(sections - linked)
    assert text.index("Contents: ") < text.index("\n## ")


def test_every_claim_names_one_python_block():
    for key in CLAIMS:
        assert sum(key in block.text for block in PYTHON) == 1, f"no single python block holds {key!r}"


# --- the command lines ----------------------------------------------------------------------------


def shell_commands(block: Block) -> List[Tuple[str, List[str]]]:
    """``(file:line, words)`` of each command of a shell block: continued lines joined, comments
    dropped, split at && || ; |, leading ``VAR=value`` assignments dropped."""
    commands, lines, i = [], block.text.split("\n"), 0
    while i < len(lines):
        first, line = i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i]
        i += 1
        current: List[str] = []
        for word in shlex.split(line, comments=True) + [";"]:
            if word not in ("&&", "||", ";", "|"):
                current.append(word)
                continue
            while current and re.match(r"^[A-Z_][A-Z0-9_]*=", current[0]):
                current.pop(0)
            if current:
                commands.append((f"{block.path.relative_to(ROOT)}:{block.line + first}", current))
            current = []
    return commands


def spacy_elmo_call(words: List[str]):
    """``(command, args)`` of ``spacy-elmo CMD ...`` / ``python -m spacy_elmo CMD ...`` (torchrun
    too), else None. A literal ``...`` (the rest as above) is dropped."""
    for i, word in enumerate(words):
        if word.endswith("spacy-elmo") or (word == "spacy_elmo" and i and words[i - 1] == "-m"):
            rest = [w for w in words[i + 1 :] if w != "..."]
            return (rest[0], rest[1:]) if rest and not rest[0].startswith("-") else (None, rest)
    return None


@pytest.fixture(scope="module")
def cli():
    import typer.main

    from spacy_elmo.cli import app

    return typer.main.get_command(app)


def command_options(command) -> set:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}


def flags(words: List[str]) -> List[str]:
    return [w.split("=", 1)[0] for w in words if FLAG.fullmatch(w.split("=", 1)[0])]


#: Lines of a skipped block are not parsed (a value may need this machine: ``--device cuda``), but their flags are checked.
CLI_LINES = [(where, words) for block in SHELL if not block.skip for where, words in shell_commands(block) if spacy_elmo_call(words)]


@pytest.mark.parametrize("where,words", CLI_LINES, ids=[f"{w} {spacy_elmo_call(ws)[0]}" for w, ws in CLI_LINES])
def test_spacy_elmo_command_line_parses(where, words, cli):
    """The command's own parser takes the line: its options, arguments and the values its callbacks check."""
    name, args = spacy_elmo_call(words)
    if name is None:
        assert set(flags(args)) <= command_options(cli), f"{where}: {' '.join(words)}"
        return
    assert name in cli.commands, f"{where}: no command {name!r} (commands: {sorted(cli.commands)})"
    command = cli.commands[name]
    try:
        command.make_context(name, list(args))
    except Exception as err:  # click's usage errors: the line does not parse
        pytest.fail(f"{where}: `{' '.join(words)}` does not parse: {type(err).__name__}: {err}")


def test_commands_named_in_the_text_have_their_options(cli):
    """``spacy-elmo CMD --flag`` or ``CMD --flag`` in an inline code span: CMD has that option."""
    wrong = []
    for path in DOCS:
        for span in inline_spans(path):
            words = span.split()
            call = spacy_elmo_call(words)
            if call is None and words[0] in cli.commands and len(words) > 1:
                call = (words[0], words[1:])
            if call is None:
                continue
            name, args = call
            known = command_options(cli.commands[name]) if name in cli.commands else command_options(cli)
            if name is not None and name not in cli.commands:
                wrong.append(f"{path.name}: `{span}`: no command {name!r}")
            wrong += [f"{path.name}: `{span}`: {name} has no {flag}" for flag in flags(args) if flag not in known]
    assert not wrong, "\n".join(wrong)


def benchmark_options(script: Path) -> set:
    """The option strings of a benchmark script and of the ``benchmarks`` modules it imports."""
    sources, options = [script], set()
    tree = ast.parse(script.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "benchmarks":
            names = [node.module.split(".", 1)[1]] if "." in node.module else [a.name for a in node.names]
            sources += [ROOT / "benchmarks" / f"{n}.py" for n in names if (ROOT / "benchmarks" / f"{n}.py").exists()]
    for source in sources:
        text = source.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and FLAG.fullmatch(node.value):
                options.add(node.value)
        if "BooleanOptionalAction" in text:
            options |= {"--no-" + o[2:] for o in options}
    return options


#: A command another tool runs, quoted in a code block's comment: ``# (or python -m build --sdist)``.
QUOTED_COMMAND = re.compile(r"\b(?:python|pip|torchrun)\b[^()#;]*")


def other_tool_lines():
    """``(where, words)`` of every command line, in code blocks (their comments' quoted commands too) and inline spans."""
    for block in SHELL:
        yield from shell_commands(block)
        for n, line in enumerate(block.text.split("\n")):
            for quoted in QUOTED_COMMAND.findall(line.partition("#")[2]):
                yield f"{block.path.relative_to(ROOT)}:{block.line + n}", quoted.split()
    for path in DOCS:
        for span in inline_spans(path):
            try:
                words = shlex.split(span)
            except ValueError:
                continue
            if len(words) > 1 and not words[0].startswith("-"):  # a program and its arguments, not `--flag VALUE`
                yield path.name, words


def shipped_config_keys(stem: str) -> Optional[set]:
    from spacy_elmo.configs import config_path

    try:
        path = config_path(stem)
    except ValueError:
        return None
    from thinc.api import Config

    def keys(block: dict, prefix: str):
        for key, value in block.items():
            yield f"{prefix}.{key}"
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}.{key}")

    config = Config().from_disk(path, interpolate=False)
    return {key for section, values in config.items() if isinstance(values, dict) for key in keys(values, f"--{section}")}


def make_targets_and_variables() -> set:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([\w.-]+):(?!=)", text, re.M)) | {f"{v}=" for v in re.findall(r"^(\w+)\s*[?:]?=", text, re.M)}


def spacy_train_options() -> set:
    """The options of spaCy's own ``spacy train`` command (``--output``, ``--code``, ...), from its CLI."""
    import spacy.cli
    import typer.main

    return command_options(typer.main.get_command(spacy.cli.app).commands["train"])


def test_benchmark_make_and_spacy_train_lines_name_existing_options():
    """``python benchmarks/X.py --flag``: X has the option; ``make T VAR=...``: the Makefile has T and
    VAR; ``spacy train X.cfg --a.b``: the shipped config X has the setting, or ``spacy train`` the option."""
    wrong, make, train_options = [], make_targets_and_variables(), spacy_train_options()
    for where, words in other_tool_lines():
        if words[0] == "make":
            wrong += [f"{where}: the Makefile has no {w}" for w in words[1:] if re.sub(r"=.*", "=", w) not in make]
        script = next((w for w in words if re.fullmatch(r"benchmarks/\w+\.py", w)), None)
        if script:
            known = benchmark_options(ROOT / script)
            wrong += [f"{where}: {script} has no {flag}" for flag in flags(words) if flag not in known]
        train = next((i for i in range(len(words) - 1) if words[i : i + 2] == ["spacy", "train"]), None)
        if train is not None and len(words) > train + 2 and words[train + 2].endswith(".cfg"):
            keys = shipped_config_keys(Path(words[train + 2]).stem)
            if keys is not None:
                wrong += [f"{where}: {words[train + 2]} has no {flag[2:]}" for flag in flags(words)
                          if flag not in keys | train_options]
    assert not wrong, "\n".join(wrong)


def spacy_train_lines(tmp_path: Path):
    """``(where, words)`` of every ``spacy train CONFIG`` command the user is shown: in the docs (code blocks,
    their comments, inline spans), in the shipped configs' comments, and printed by ``spacy-elmo config``
    (its help and what it says after writing a file)."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app
    from spacy_elmo.configs import config_names, config_path

    shown = [(where, words) for where, words in other_tool_lines()]
    for name in config_names():
        for n, line in enumerate(config_path(name).read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("#"):
                shown.append((f"{name}.cfg:{n}", line.lstrip("# ").split()))
    runner = CliRunner()
    said = runner.invoke(app, ["config", "ner", str(tmp_path / "ner.cfg")]).output
    helped = runner.invoke(app, ["config", "--help"], terminal_width=1000).output
    shown += [("spacy-elmo config", line.split()) for line in said.splitlines() + [" ".join(helped.split())]]
    for where, words in shown:
        for i in range(len(words) - 2):
            # a command (``python -m spacy train X``, ``spacy train X.cfg``), not prose ("a spacy train config")
            if words[i : i + 2] == ["spacy", "train"] and (words[i - 1 : i] == ["-m"] or words[i + 2].endswith(".cfg")):
                yield where, words[i:]


def test_every_spacy_train_line_saves_the_pipeline(tmp_path):
    """spaCy's ``train`` saves model-best and model-last only where ``--output`` (``-o``) names a directory:
    every command shown without it trained and saved nothing."""
    lines = list(spacy_train_lines(tmp_path))
    assert sum(where == "spacy-elmo config" for where, _ in lines) == 2  # its help and what it printed
    assert {"--output", "--output-path"} <= spacy_train_options()
    wrong = [f"{where}: {' '.join(words)}" for where, words in lines
             if not {"--output", "--output-path", "-o"} & {w.split("=", 1)[0] for w in words}]
    assert not wrong, "\n".join(wrong)


def test_every_flag_in_the_text_exists(cli):
    """A ``--flag`` in prose (or a code comment) is an option of a spacy-elmo command, of a benchmark
    script, or appears on a command line of another tool in the docs (pip, spacy train, torchrun...)."""
    known = {"--help"} | command_options(cli).union(*(command_options(c) for c in cli.commands.values()))
    for script in (ROOT / "benchmarks").glob("*.py"):
        known |= benchmark_options(script)
    for _, words in other_tool_lines():
        if not spacy_elmo_call(words) and not any(re.fullmatch(r"benchmarks/\w+\.py", w) for w in words):
            known |= set(flags(words))
    texts = [(path, 1, prose(path)) for path in DOCS]
    texts += [(b.path, b.line, re.sub(r"^[^#\n]*", "", b.text, flags=re.M)) for b in SHELL]  # comments, lines kept
    unknown = [f"{path.relative_to(ROOT)}:{first + text.count(chr(10), 0, m.start())}: {m.group()}"
               for path, first, text in texts for m in FLAG.finditer(text) if m.group() not in known]
    assert not unknown, "\n".join(unknown)


# --- links and paths ------------------------------------------------------------------------------


def github_anchor(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set:
    return {github_anchor(m) for m in re.findall(r"^#+\s+(.+)$", prose(path), re.M)}


def test_relative_links_and_anchors_exist():
    wrong = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(path)):
            if re.match(r"^[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                wrong.append(f"{path.name}: ({target}): no file {file}")
            elif anchor and anchor not in anchors(linked):
                wrong.append(f"{path.name}: ({target}): no heading #{anchor} in {linked.name}")
    assert not wrong, "\n".join(wrong)


#: Paths the text names that a build writes: absent from a checkout without the extension built.
BUILT = {"spacy_elmo/_C*.so"}


def glob_matches(pattern: str, paths: List[str]) -> bool:
    """Whether a shell glob (``*`` within one directory) names one of ``paths``."""
    regex = re.compile("[^/]*".join(re.escape(piece) for piece in pattern.rstrip("/").split("*")))
    return any(regex.fullmatch(path) for path in paths)


def test_repository_paths_in_backticks_exist():
    paths = repository_files()
    tops = {path for path in paths if "/" not in path and not (ROOT / path).is_file()}
    wrong = []
    for path in DOCS:
        for span in inline_spans(path):
            for word in span.split():
                candidate = word[3:] if word.startswith("../") else word
                if candidate in BUILT or "/" not in candidate or candidate.split("/")[0] not in tops:
                    continue
                if not glob_matches(candidate, paths):
                    wrong.append(f"{path.name}: `{span}`")
    assert not wrong, "\n".join(wrong)


# --- names ----------------------------------------------------------------------------------------

DOTTED = re.compile(r"\b(?:spacy_elmo(?:\.[A-Za-z_]\w*)+|(?:BiLM|BiLMConfig|BiLMOutput|ScalarMix|Errors|Warnings)\.[A-Za-z_]\w*)")
#: Classes the text names that ``spacy_elmo`` does not export.
OWNERS = {"Errors": errors.Errors, "Warnings": errors.Warnings}


def test_names_in_backticks_exist(user_files):
    """``spacy_elmo.module.name`` imports, a registered ``spacy_elmo.Name.vN`` is registered, and
    ``BiLM.name`` is an attribute of the class or of a loaded model."""
    import importlib

    import spacy_elmo
    import spacy_elmo.pipeline  # noqa: F401 - registers the architectures
    from spacy.util import registry

    model = spacy_elmo.BiLM.load(user_files / "my_model_dir")
    wrong = []
    for path in DOCS:
        for name in sorted({m for span in inline_spans(path) for m in DOTTED.findall(span)}):
            if name == "spacy_elmo._C":  # the compiled extension: absent where it is not built
                continue
            if re.search(r"\.v\d+$", name):
                found = any(name in getattr(registry, kind) for kind in ("architectures", "layers", "misc"))
            elif name.startswith("spacy_elmo."):
                parts, found = name.split("."), False
                for cut in range(len(parts), 0, -1):
                    try:
                        value = importlib.import_module(".".join(parts[:cut]))
                    except ImportError:
                        continue
                    try:
                        for attr in parts[cut:]:
                            value = getattr(value, attr)
                        found = True
                    except AttributeError:
                        pass
                    break
            else:
                owner, attr = name.split(".")
                cls = OWNERS.get(owner) or getattr(spacy_elmo, owner)
                found = hasattr(cls, attr) or (owner == "BiLM" and hasattr(model, attr))
            if not found:
                wrong.append(f"{path.name}: `{name}`")
    assert not wrong, "\n".join(wrong)


# --- names without their place: a result file, a function, a constant -----------------------------

#: Extensions of the file names that ``stale_file_names`` checks.
FILE_NAME = re.compile(r"[\w*-]+(?:/[\w*.-]+)*\.(?:json|jsonl|png|md|txt|gz|bz2|xz|py|cfg|toml|sh|safetensors|hdf5|th|db|ini|spacy)")
#: A name of code: a snake_case or UPPER_CASE identifier (with ``*`` for a family of results), or any ``name()``.
CODE_NAME = re.compile(r"(?P<name>[A-Za-z_][\w*]*_[\w*]+)|(?P<called>[A-Za-z_]\w*)\(\)")
CODE_FILES = ("*.py", "*.cpp", "*.cu", "*.cuh", "*.h", "*.cfg", "*.sh", "*.toml", "Makefile")


def _kept(path: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is none of the hidden files, builds and caches."""
    return not any(part.startswith(".") or part in {"build", "dist", "__pycache__"} or part.endswith(".egg-info")
                   for part in path.split("/"))


def checkout_files(root: Path = ROOT) -> List[str]:
    """Paths (relative to ``root``, ``/``-separated) of the repository's files; hidden ones, builds and caches
    left out. In a git checkout the files git tracks or would (untracked, not ignored): an ignored local file
    (under ``tmp/``, a result kept aside) is no file of the repository, and a doc naming it passed here but
    failed in CI's clean clone. Elsewhere (an unpacked sdist) every file below ``root``."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape").split("\0")
    except (OSError, subprocess.CalledProcessError):  # no git, or no checkout
        listed = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted({path for path in listed if path and _kept(path) and (root / path).is_file()})


def repository_files(root: Path = ROOT) -> List[str]:
    """:func:`checkout_files` and the directories that hold them."""
    files = checkout_files(root)
    directories = {path.rsplit("/", cut)[0] for path in files for cut in range(1, path.count("/") + 1)}
    return sorted(set(files) | directories)


def code_texts() -> List[str]:
    """The code of the repository, this file (which plants wrong names) left out."""
    return [(ROOT / path).read_text(encoding="utf-8", errors="replace") for path in checkout_files()
            if any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern) for pattern in CODE_FILES)
            and ROOT / path != Path(__file__).resolve()]


def code_names() -> set:
    """Every name the code defines or uses (Python: from its syntax tree, not comments or docstrings; C++
    and configs: every word) and every word of its string constants (file names, environment variables)."""
    names: set = set()
    for text in code_texts():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            names |= set(re.findall(r"\w+", text))
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.update((node.asname or node.name).split("."))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names |= set(re.findall(r"\w+", node.value))
    return names


def stale_names(paths: List[Path]) -> List[str]:
    """The inline code spans of ``paths`` that are a file name (no directory, or a path inside the results)
    no file of the repository, no code and no code block of the docs has, or a name of code that neither
    the code, nor torch, nor a repository file or directory (a benchmark result: ``textcat_s4*``) has."""
    files = repository_files()
    basenames = {f.rsplit("/", 1)[-1] for f in files}
    import torch
    from spacy.language import Language
    from spacy.pipeline.factories import register_factories

    register_factories()  # spaCy 3.8 registers its factories when a Language is first made, not at import

    # torch's own names (``index_add_``), which the text uses to say what the code runs, and spaCy's
    # component factories (``beam_parser``), which it names as what the listeners work with
    known = code_names() | {name.split(".")[0] for name in basenames} | set(dir(torch)) | set(dir(torch.Tensor))
    known |= set(Language.factories)
    used_in_code = "\n".join(code_texts()) + "\n".join(b.text for b in BLOCKS)
    wrong = []
    for path in paths:
        for span in inline_spans(path):
            if FILE_NAME.fullmatch(span):
                pattern = span.lstrip("*")
                found = (
                    any(fnmatch.fnmatch(f, span) or fnmatch.fnmatch(f, "*/" + span) for f in files)
                    or (span.startswith(("_", "*")) and any(fnmatch.fnmatch(name, "*" + pattern) for name in basenames))
                    or ("*" not in span and re.search(rf"(?<![\w.]){re.escape(span)}(?![\w.])", used_in_code) is not None)
                )
            else:
                code = CODE_NAME.fullmatch(span)
                if code is None:
                    continue
                name = code.group("name") or code.group("called")
                found = name in known or ("*" in name and any(fnmatch.fnmatch(b, name) for b in basenames))
            if not found:
                wrong.append(f"{path.name}: `{span}`")
    return wrong


def test_file_and_code_names_in_backticks_exist():
    wrong = stale_names(DOCS)
    assert not wrong, "\n".join(wrong)


def test_stale_names_are_found(tmp_path):
    """Planted: names that were renamed or never existed are found; the real ones they mimic are not."""
    planted = tmp_path / "planted.md"
    good = ["pretrain_cpu_b128.json", "ner_conll2003_s6/ner_conll2003.png", "_glibcdefault.json", "textcat_s4*",
            "textcat_bbc_sentences", "read_log()", "TOKENIZE_TIMEOUT", "train_log.jsonl", "test_readme", "beam_parser"]
    bad = ["pretrain_cpu_b256.json", "ner_conll2003_s99/ner_conll2003.png", "_glibcdefaults.json", "textcat_s99*",
           "textcat_bbc_paragraphs", "read_logs()", "TOKENIZE_TIMEOUTS", "train_log.json", "test_readme_old", "beam_parsers"]
    planted.write_text(" ".join(f"`{name}`" for name in good + bad) + "\n", encoding="utf-8")
    assert stale_names([planted]) == [f"planted.md: `{name}`" for name in bad]


@pytest.mark.skipif(shutil.which("git") is None, reason="git lists a checkout's files")
def test_repository_files_are_the_ones_a_clone_has(tmp_path):
    """A local file git ignores (under an ignored ``tmp/``) counted as a repository file: a doc naming it
    passed here and failed in CI's clean clone. A file not yet added (not ignored) counts: it is being written."""
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / ".gitignore").write_text("/tmp/\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("guide\n", encoding="utf-8")
    git("add", ".gitignore", "docs/guide.md")
    (tmp_path / "new.py").write_text("\n", encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "local_only.json").write_text("{}\n", encoding="utf-8")
    assert repository_files(tmp_path) == ["docs", "docs/guide.md", "new.py"]
    shutil.rmtree(tmp_path / ".git")  # no checkout (an unpacked sdist): every file
    assert repository_files(tmp_path) == ["docs", "docs/guide.md", "new.py", "tmp", "tmp/local_only.json"]
