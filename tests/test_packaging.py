"""What an sdist carries and what the package metadata says, read from setuptools' own
file list (``egg_info`` writes SOURCES.txt, the list ``sdist`` archives) outside the
repository; nothing is compiled. Building a wheel from the sdist takes minutes: that
check is done by hand (README, "Building by hand")."""

import ast
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def egg_info(source: Path, out: Path, **env: str) -> Path:
    """Run ``setup.py egg_info`` in ``source`` writing into ``out``; the .egg-info folder."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(out)],
        cwd=source, env={**os.environ, **env}, check=True, capture_output=True, text=True,
    )
    (info,) = out.glob("*.egg-info")
    return info


def files_under(folder: str):
    """The files git tracks under ``folder``: what ships (a working tree's build leftovers and bytecode do not:
    MANIFEST.in's global-exclude)."""
    listed = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT, check=True, capture_output=True).stdout
    return {name for name in listed.decode().split("\0") if name}


@pytest.mark.parametrize(
    "env",
    [{"SPACY_ELMO_CUDA": "0"}, {"SPACY_ELMO_NO_EXTENSION": "1"}],
    ids=["no-cuda", "no-extension"],
)
def test_sdist_carries_every_kernel_source_and_the_package_data(tmp_path, env):
    """Whatever the machine making the sdist builds, the sdist can build the extension
    (headers and CUDA files included) and ships the default model and the configs."""
    listed = set((egg_info(ROOT, tmp_path, **env) / "SOURCES.txt").read_text().split())
    kernels = files_under("csrc")
    assert {"csrc/include/ops.h", "csrc/cuda/common.cuh", "csrc/cuda/lstm.cu", "csrc/bindings.cpp"} <= kernels
    assert kernels - listed == set()
    data = files_under("spacy_elmo/data/default") | files_under("spacy_elmo/configs")
    assert {"spacy_elmo/data/default/model.safetensors", "spacy_elmo/configs/ner.cfg"} <= data
    assert data - listed == set()
    assert {"setup.py", "build_flags.py", "pyproject.toml", "README.md", "LICENSE"} <= listed
    assert not [f for f in listed if f.startswith(("tests/", "benchmarks/"))]


def test_sdist_leaves_out_build_leftovers_and_stray_files_of_a_working_tree(tmp_path):
    """A working tree's object files, editor files and an interrupted write beside the bundled model stay out of the
    sdist and the package data: MANIFEST.in's graft took all of csrc/, and "data/**/*" every file under data/."""
    source = tmp_path / "src"
    source.mkdir()
    names = ["setup.py", "build_flags.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "docs", "csrc",
             "spacy_elmo"]
    for name in names:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__", "_C*")}
                                            if (ROOT / name).is_dir() else {}))
    strays = ["csrc/build.o", "csrc/.DS_Store", "csrc/cpu/lstm.cpp.orig", "spacy_elmo/data/default/model.safetensors.tmp",
              "spacy_elmo/configs/ner.cfg~"]
    for stray in strays:
        (source / stray).write_bytes(b"x")
    listed = set((egg_info(source, tmp_path / "out", SPACY_ELMO_NO_EXTENSION="1") / "SOURCES.txt").read_text().split())
    assert not set(strays) & listed
    assert {"spacy_elmo/data/default/model.safetensors", "spacy_elmo/data/default/config.json",
            "spacy_elmo/data/default/vocab.txt", "spacy_elmo/configs/ner.cfg", "csrc/cpu/lstm.cpp",
            "docs/architecture.md"} <= listed


def test_distribution_version_is_the_package_version(tmp_path):
    """One version: the distribution's metadata reads spacy_elmo.__version__."""
    source = tmp_path / "src"
    (source / "spacy_elmo").mkdir(parents=True)
    # what the sdist carries for setup.py: build_flags.py reads its messages from spacy_elmo/errors.py and
    # its switches through spacy_elmo/switches.py
    for name in ("pyproject.toml", "setup.py", "build_flags.py", "README.md", "LICENSE", "spacy_elmo/errors.py",
                 "spacy_elmo/switches.py"):
        shutil.copy(ROOT / name, source / name)
    init = (ROOT / "spacy_elmo" / "__init__.py").read_text()
    bumped, n = re.subn(r'^__version__ = "[^"]*"', '__version__ = "9.9.9"', init, flags=re.M)
    assert n == 1
    (source / "spacy_elmo" / "__init__.py").write_text(bumped)
    info = egg_info(source, tmp_path / "out", SPACY_ELMO_NO_EXTENSION="1")
    assert re.search(r"^Version: (.*)$", (info / "PKG-INFO").read_text(), re.M).group(1) == "9.9.9"


def test_dir_of_the_package_lists_its_api_before_it_is_imported():
    """The API is imported on first use (PEP 562 ``__getattr__``): dir() (help(), tab completion) still lists it,
    and listing it imports nothing (torch stays unimported, as the command line's start needs)."""
    code = ("import sys, spacy_elmo; names = dir(spacy_elmo); print(sorted(names) == names); "
            "print(sorted(set(spacy_elmo.__all__) - set(names))); print('torch' in sys.modules, 'BiLM' in "
            "vars(spacy_elmo), '__getattr__' in names)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    # sorted, as dir() is; every name of the API, none imported; the module's own names too
    assert out.split("\n")[:3] == ["True", "[]", "False False True"]


def test_submodules_are_attributes_of_the_package_after_import_spacy_elmo():
    """``import spacy_elmo`` then ``spacy_elmo.bilm.load_exported`` / ``spacy_elmo.ops.fused_available()``: the
    eager package imported its submodules, the lazy one imports one on first use; a name that is neither API nor
    submodule is still an AttributeError (hasattr() probes, typos)."""
    code = ("import spacy_elmo; print(spacy_elmo.bilm.load_exported.__module__, spacy_elmo.ops.fused_available.__name__); "
            "print(hasattr(spacy_elmo, 'bilmm'), hasattr(spacy_elmo, '__wrapped__'), hasattr(spacy_elmo, '_C'), "
            "hasattr(spacy_elmo, 'nope.x'), 'bilm.model' in dir(spacy_elmo))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["spacy_elmo.bilm.exported fused_available", "False False False False False"]


@pytest.mark.skipif(sys.version_info < (3, 10),
                    reason="importlib.metadata.packages_distributions and sys.stdlib_module_names need Python 3.10")
def test_every_imported_distribution_is_a_declared_dependency(tmp_path):
    """A module the package imports (at any depth, lazily too) comes from a distribution
    its metadata requires: an undeclared one works here only because another package
    happened to pull it in."""
    requires = (egg_info(ROOT, tmp_path, SPACY_ELMO_NO_EXTENSION="1") / "requires.txt").read_text()
    declared = {
        re.split(r"[<>=!~; \[]", line, maxsplit=1)[0].lower().replace("_", "-")
        for line in requires.split("\n[")[0].splitlines() if line.strip()
    }
    owners = importlib.metadata.packages_distributions()
    imported = {}
    for path in (ROOT / "spacy_elmo").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "spacy_elmo" and top not in sys.stdlib_module_names:
                    imported.setdefault(top, path.relative_to(ROOT).as_posix())
    undeclared = {
        top: where for top, where in imported.items()
        if not {d.lower().replace("_", "-") for d in owners.get(top, [top])} & declared
    }
    assert undeclared == {}


def test_installs_without_isolation_take_the_declared_build_tools():
    """``make install`` and the README's build by hand install the build tools themselves (the build runs
    with --no-build-isolation), as pyproject's [build-system] requires them: with a bare ``setuptools`` the
    venv's own (65 with Python 3.11) stayed unless torch pulled a newer one (2.13 does, 2.4 does not), and
    the build failed on pyproject's license field."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    requires = re.search(r"^\[build-system\]\nrequires = \[(.*?)\]", pyproject, re.M | re.S).group(1)
    tools = [r for r in re.findall(r'"([^"]+)"', requires) if not r.startswith("torch")]
    assert any(r.startswith("setuptools>=") for r in tools)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    lines = [line for text in (readme, makefile) for line in text.splitlines()
             if re.search(r"\bpip\b.* install .*\bsetuptools\b", line, re.I) and not line.lstrip().startswith("#")]
    assert len(lines) >= 2
    for line in lines:
        words = shlex.split(line.split(" #")[0])
        assert [tool for tool in tools if tool not in words] == [], line


def test_sdist_and_package_data_carry_the_typing_marker(tmp_path):
    """spacy_elmo/py.typed (PEP 561) ships, so users' type checkers read the package's hints
    (setuptools >= 69, which pyproject's build requires, packages it by itself)."""
    listed = set((egg_info(ROOT, tmp_path, SPACY_ELMO_NO_EXTENSION="1") / "SOURCES.txt").read_text().split())
    assert "spacy_elmo/py.typed" in listed


@pytest.mark.skipif(sys.version_info < (3, 10), reason="mypy 2 (the test extra's pin) needs Python 3.10")
def test_type_hints_hold():
    """mypy (settings: pyproject's [tool.mypy]) finds no error in the package and benchmarks/: the
    hints users' checkers read through py.typed stay true, and the benchmarks call the package as
    its hints say. Its cache lives under build/ (about 25 s cold on 2 cores, a few seconds warm)."""
    cache = ROOT / "build" / "mypy_cache"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert "No module named mypy" not in result.stderr, "install the test tools: pip install -e '.[test]'"
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_type_aliases_are_defined_once():
    """``PathLike = Union[str, Path]`` was written out in 11 modules: now spacy_elmo/_typing.py alone
    defines a module-level alias (an assignment of a typing construct), and the modules import it."""
    definitions = []
    for path in sorted((ROOT / "spacy_elmo").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
                base = node.value.value
                if isinstance(base, ast.Name) and base.id in ("Union", "Optional"):
                    definitions += [(path.relative_to(ROOT).as_posix(), t.id) for t in node.targets
                                    if isinstance(t, ast.Name)]
    assert definitions == [("spacy_elmo/_typing.py", "PathLike")]


# A stand-in for .venv/bin/python: logs each call (pip or setup.py) to calls.log, and `setup.py build_ext`
# puts a _C file where the real build would.
_FAKE_PYTHON = """#!/bin/sh
echo "${SPACY_ELMO_NO_EXTENSION:+NO_EXTENSION=$SPACY_ELMO_NO_EXTENSION }$*" >> calls.log
case "$*" in *build_ext*) mkdir -p build && : > spacy_elmo/_C.cpython-311-x86_64-linux-gnu.so ;; esac
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_compiles_once_and_again_only_what_changed(tmp_path):
    """``make test`` and ``make demo`` run ``make install`` every time: a clean clone sets up torch, the
    editable install and the extension; after that nothing runs until something changes: the packaging
    files redo the editable install (which builds nothing: pip's editable build compiled every source again
    in a fresh temporary folder), a kernel source or a missing _C rebuilds it in place (build/ keeps
    ninja's objects), a new torch clears build/ first. Run on a copy with a logging stand-in for the venv's
    python."""
    for name in ["Makefile", "pyproject.toml", "setup.py", "build_flags.py"]:
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ["csrc/bindings.cpp", "csrc/include/ops.h"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "spacy_elmo").mkdir()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(_FAKE_PYTHON)
    python.chmod(0o755)
    torch_version = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "torch" / "version.py"
    log = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPACY_ELMO_", "MAKE", "TORCH_"))}

    def make_install(*after):
        """What `make install` runs (and whether it cleared build/), after touching ``after`` (paths in the
        copy): newer than the stamps of the last run, which are put 10 s back (file times tick coarsely)."""
        for path in tmp_path.rglob("*"):
            if path.is_file():
                old = path.stat().st_mtime - 10
                os.utime(path, (old, old))
        for name in after:
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        log.write_text("")
        (tmp_path / "build").mkdir(exist_ok=True)
        (tmp_path / "build" / "object.o").touch()
        res = subprocess.run(["make", "install"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        cleared = ["build/ cleared"] if not (tmp_path / "build" / "object.o").exists() else []
        return log.read_text().splitlines() + cleared

    pip_e = "NO_EXTENSION=1 -m pip install -q --no-build-isolation -e .[test]"
    build = "setup.py -q build_ext --inplace --force"
    first = make_install()  # torch and the build tools, the editable install, the extension
    assert first[0] == "-m pip install -q --upgrade pip" and first[-3:] == [pip_e, build, "build/ cleared"]
    assert [c for c in first if "-e" in c.split() or "build_ext" in c] == [pip_e, build]
    assert make_install(torch_version.relative_to(tmp_path)) == [build, "build/ cleared"]
    assert make_install() == []
    assert make_install("csrc/include/ops.h") == [build]  # a header: ninja finds what includes it
    assert make_install("pyproject.toml") == [pip_e]
    assert make_install("build_flags.py") == [pip_e, build]
    (tmp_path / "spacy_elmo" / "_C.cpython-311-x86_64-linux-gnu.so").unlink()
    assert make_install() == [build]
    assert subprocess.run(["make", "clean"], cwd=tmp_path, env=env, capture_output=True).returncode == 0
    assert make_install() == [build, "build/ cleared"]
    assert make_install() == []


def _pip_installs(text: str):
    """The ``pip install ...`` commands in backticks in ``text`` (messages, README prose and code lines)."""
    return re.findall(r"`(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?pip install [^`]*`", text)


def test_every_rebuild_command_bypasses_pips_wheel_cache():
    """pip caches the wheel it builds from an sdist it got from an index, keyed by the sdist's URL and the
    interpreter: reinstalling to add the kernels (SPACY_ELMO_NO_EXTENSION unset, SPACY_ELMO_CUDA=1,
    TORCH_CUDA_ARCH_LIST) or to build for a new torch put the cached build back, in about a second, without
    compiling anything. So every command that builds again says --no-cache-dir: each build command of the
    messages (they are all advice after a build that was wrong or missing) and each --force-reinstall of the
    README; the messages asking for a rebuild share one wording of it (errors._rebuild). A message that says to
    build with a variable set (SPACY_ELMO_CUDA=1, TORCH_CUDA_ARCH_LIST) sets it inside each command, which
    otherwise pasted builds without it; and a message that says "rebuild" gives the command. The fix of a missing
    _C (W_FIX_BUILD, which says to build with SPACY_ELMO_NO_EXTENSION=0) puts it in each command too: the
    SPACY_ELMO_NO_EXTENSION=1 that built none may still be exported, and the pasted rebuild would build none."""
    from spacy_elmo import errors

    said = [m for cls in (errors.Errors, errors.Warnings) for name, m in vars(cls).items() if name[:2] in ("E_", "W_")]
    builds = [c for m in said for c in _pip_installs(m) if "--no-build-isolation" in c]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reinstalls = [c for c in _pip_installs(readme) if "--force-reinstall" in c]
    assert len(builds) >= 5 and len(reinstalls) >= 2  # what there was when the test was written: 13 and 3
    assert [c for c in builds + reinstalls if "--no-cache-dir" not in c.split()] == []
    E, W = errors.Errors, errors.Warnings
    for message, env in ((W.W_FIX_BUILD, "SPACY_ELMO_NO_EXTENSION=0"), (W.W_BUILD_NO_OPENMP, ""), (W.W_INFO_NO_OPENMP, ""),
                         (W.W_INFO_SWITCH_BUILD_TIME.format(setting="SPACY_ELMO_CUDA=1"), "SPACY_ELMO_CUDA=1"),
                         (E.E_FUSED_NO_CUDA_KERNELS, "SPACY_ELMO_CUDA=1"), (W.W_FUSED_NO_CUDA_KERNELS, "SPACY_ELMO_CUDA=1"),
                         (W.W_INFO_GPU_NO_CUDA_KERNELS, "SPACY_ELMO_CUDA=1"),
                         (W.W_INFO_GPU_NO_CODE, "TORCH_CUDA_ARCH_LIST={cap}"),
                         (W.W_INFO_GPU_NO_TENSOR_CORES, "TORCH_CUDA_ARCH_LIST={cap}")):
        assert errors._rebuild(env) in message and "--force-reinstall SOURCE" in message, message
        commands = _pip_installs(message)
        assert len(commands) == 2 and all(c.startswith(f"`{env} pip" if env else "`pip") for c in commands), message
    # every message that says to set a variable for a build sets it in its commands
    for message in said:
        for variable in re.findall(r"with ((?:SPACY_ELMO_CUDA|TORCH_CUDA_ARCH_LIST)=\S+) set", message):
            assert errors._rebuild(variable) in message, message
        if re.search(r"with SPACY_ELMO_NO_EXTENSION(?:=0| unset)", message):
            commands = _pip_installs(message)
            assert commands and all(c.startswith("`SPACY_ELMO_NO_EXTENSION=0 ") for c in commands), message
    for fix in ("To add the kernels later", "the compiled extension spacy_elmo._C is not available"):
        readme_fix = readme[readme.index(fix):][:600]
        commands = _pip_installs(readme_fix)
        assert commands and [c for c in commands if not c.startswith("`SPACY_ELMO_NO_EXTENSION=0 ")] == [], fix
    # the benchmarks' own word for a missing _C is the package's fix, not a command of their own
    for script in ("benchmarks/kernels.py", "benchmarks/pretrain.py"):
        assert "pip install" not in (ROOT / script).read_text(encoding="utf-8"), script
