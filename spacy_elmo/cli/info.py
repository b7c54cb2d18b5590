"""``spacy-elmo info``: what is installed and what runs, for a bug report (as ``spacy info``)."""

import importlib.metadata
import json
import platform
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import typer

from .. import __version__, ops, switches
from ..errors import Warnings
from ..paths import shell_quoted
from .app import app, extension_warning_hidden


def _spacy_version() -> Optional[str]:
    """The installed spaCy's version, None when it is not installed (read from its metadata: no import)."""
    try:
        return importlib.metadata.version("spacy")
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus() -> List[Dict[str, str]]:
    """The GPUs torch sees: name and compute capability."""
    if not torch.cuda.is_available():
        return []
    return [{"name": torch.cuda.get_device_name(i), "capability": "{}.{}".format(*torch.cuda.get_device_capability(i))}
            for i in range(torch.cuda.device_count())]


def _version(text: str) -> Tuple[int, int]:
    """"9.0" -> (9, 0)."""
    major, _, minor = text.partition(".")
    return int(major), int(minor[:1] or 0)


def _gpu_note(capability: str, archs: List[str]) -> str:
    """What of the CUDA kernels runs on a GPU of ``capability``: the driver runs the code of the highest
    compiled architecture at or below it (its own, or PTX compiled at load), and the char CNN's fp16/bf16
    tensor-core kernel is empty in code for an architecture below 8.0 (csrc/cuda/char_cnn.cu)."""
    cap = _version(capability)
    runs = max((_version(a) for a in archs if _version(a) <= cap), default=None)
    if runs is None:
        return Warnings.W_INFO_GPU_NO_CODE.format(archs=", ".join(archs), cap=capability)
    if runs < (8, 0):
        return Warnings.W_INFO_GPU_NO_TENSOR_CORES.format(arch="{}.{}".format(*runs), cap=capability)
    return "the fp16/bf16 char CNN runs on tensor cores"


def info_facts() -> Dict[str, Any]:
    """Everything ``spacy-elmo info`` prints, as ``--json`` writes it."""
    # W_NO_EXTENSION: the reason and the fix are among the facts, printed once
    with extension_warning_hidden(), warnings.catch_warnings():
        warnings.simplefilter("ignore", switches.SwitchWarning)  # among the facts too ("switches")
        build = ops.build_info()
    return {
        "spacy_elmo": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "spacy": _spacy_version(),
        "torch_threads": torch.get_num_threads(),
        "build": build.as_dict(),
        "gpus": _gpus(),
        # the SPACY_ELMO_* switches set: value, and what is wrong with it (None: valid)
        "switches": {name: {"value": value, "problem": problem} for name, (value, problem) in switches.set_now().items()},
    }


def _rows(facts: Dict[str, Any]) -> List[Tuple[str, str]]:
    build = facts["build"]
    rows = [("spacy-elmo", facts["spacy_elmo"]), ("Python", facts["python"]), ("Platform", facts["platform"]),
            ("torch", facts["torch"] + (f" (CUDA {facts['torch_cuda']})" if facts["torch_cuda"] else " (CPU only)")),
            ("spaCy", facts["spacy"] or "not installed"), ("torch threads", str(facts["torch_threads"]))]
    if not build["extension"]:
        rows.append(("Compiled kernels", Warnings.W_INFO_NO_EXTENSION.format(reason=build["reason"], fix=build["fix"])))
    elif build["cpu_isa"] is None:  # an older build: it loads, and says nothing of itself
        rows.append(("Compiled kernels", "yes (spacy_elmo._C), but " + build["reason"]))
    else:
        isa, cap = build["cpu_isa"], build["cpu_isa_cap"]
        cap_problem = switches.problem(switches.CPU_ISA, cap)
        if cap_problem is not None:  # the problem itself is on the switches' row: said once
            isa += f" (SPACY_ELMO_CPU_ISA={cap!r} is not a value it takes: see 'SPACY_ELMO_* set')"
        elif isa != build["cpu_isa_supported"]:
            isa += f" (capped by SPACY_ELMO_CPU_ISA={cap}; this CPU runs {build['cpu_isa_supported']})"
        openmp = f"yes (_OPENMP {build['openmp_version']})" if build["openmp"] else Warnings.W_INFO_NO_OPENMP
        if not build["cuda"]:
            cuda = "not compiled in"
        else:
            archs = ", ".join("compute_" + a.replace(".", "") for a in build["cuda_archs"])
            cuda = (f"compiled for the virtual architectures {archs}" if archs
                    else "compiled in (nvcc did not list its targets: CUDA < 11.5)")
        rows += [("Compiled kernels", "yes (spacy_elmo._C)"), ("CPU kernels", isa), ("OpenMP", openmp),
                 ("CUDA kernels", cuda)]
    compiled: List[str] = (build.get("cuda_archs") or []) if build["extension"] and build.get("cuda") else []
    # a build whose CUDA kernels are known to be missing (False; None: no build facts)
    no_cuda = build["extension"] and build.get("cuda") is False
    gpus = [f"{gpu['name']} (compute capability {gpu['capability']}"
            + (f"; {_gpu_note(gpu['capability'], compiled)})" if compiled
               else f"; {Warnings.W_INFO_GPU_NO_CUDA_KERNELS})" if no_cuda else ")") for gpu in facts["gpus"]]
    rows.append(("GPU", "; ".join(gpus) or "none visible"))
    rows.append(("SPACY_ELMO_* set", "; ".join(_switch(name, s["value"], s["problem"])
                                                for name, s in facts["switches"].items()) or "none"))
    return rows


def _switch(name: str, value: str, problem: Optional[str]) -> str:
    """``NAME=value`` of the switches' row, with what is wrong with the value, and for a switch setup.py alone
    reads (SPACY_ELMO_NO_EXTENSION, SPACY_ELMO_CUDA) that it changed nothing here unless set for the build, with
    the rebuild command that sets it where the value is one it takes (not one its problem calls invalid)."""
    setting = f"{name}={shell_quoted(value)}"  # as the rebuild command it suggests sets it
    build_time = (Warnings.W_INFO_SWITCH_BUILD_TIME_INVALID if problem
                  else Warnings.W_INFO_SWITCH_BUILD_TIME.format(setting=setting))
    notes = [build_time] if name in switches.BUILD_TIME else []
    notes += [problem] if problem else []
    return f"{name}={value}" + (f" ({' '.join(notes)})" if notes else "")


@app.command()
def info(
    as_json: bool = typer.Option(False, "--json", help="Print the facts as JSON (machine-readable)."),
) -> None:
    """Print the versions and what runs here (paste it into a bug report).

    The spacy-elmo, Python, torch and spaCy versions; whether the compiled kernels load (if not, why and the fix), the CPU kernel variant in use, OpenMP, torch's threads, the CUDA kernels' architectures, the GPUs torch sees, and the SPACY_ELMO_* switches set (each with what is wrong with it, where something is)."""
    facts = info_facts()
    if as_json:
        typer.echo(json.dumps(facts, indent=2))
        return
    rows = _rows(facts)
    width = max(len(label) for label, _ in rows) + 2
    typer.echo("\n".join(f"{label + ':':<{width}}{value}" for label, value in rows))
