"""The biLM under PyTorch's graph tools: torch.compile (fullgraph, dynamic batch and sentence
length), torch.export (dynamic batch and time, save and load), and a clear error from the tools
that would record a wrong program (torch.jit.script / trace, export of a stateful model).

The eager model is the oracle: its outputs are checked against the float64 NumPy ELMo elsewhere.
Compiled with the ``aot_eager`` backend: it traces exactly as inductor does (dynamo, fake
tensors, AOT autograd) without generating C++; inductor itself (C++ on the CPU, 20 s on two cores)
compiles once for the module, in a child process, for its outputs and its checks of the ids."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch.export import Dim

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.ops import fused_available, reference

TINY = BiLMConfig(projection_dim=8, cell_dim=12, char_embedding_dim=4, filters=[(1, 4), (2, 6), (3, 8)], n_highway=1)
BATCHES = [  # batch and sentence length both change (sizes >= 2: torch specialises sizes 0 and 1)
    [["The", "bank", "of", "the", "river", "."], ["a", "b"], ["x", "x", "x"]],
    [["one", "two"], ["c", "d", "e", "f", "g", "h", "i", "j"]],
    [["p", "q", "r"], [], ["t", "u"], ["v", "w"]],
]
SHORT = [["a", "b"], ["c"]]  # the reference backend unrolls its loop over time: few steps to trace
needs_fused = pytest.mark.skipif(not fused_available(), reason="the compiled extension is not built")
# Before torch 2.11 the checks of the ids stay in Python (reference.GRAPH_CHECKS): a fullgraph compile or an
# export of the model fails there by design (2.9.1's inductor ran bad ids when they were in the graph).
# torch 2.7 added the flag torch.export sets (reference.exporting): before it nothing tells an export from a
# compile, so the model cannot refuse an export with its own error; torch's (a data-dependent branch in the
# checks of the ids) stops every export of the model there instead.
needs_export_flag = pytest.mark.skipif(
    getattr(torch.compiler, "_is_exporting_flag", None) is None,
    reason=f"torch {torch.__version__} has no torch.export flag (from 2.7): exporting() cannot tell an export")
needs_graph_checks = pytest.mark.skipif(
    not reference.GRAPH_CHECKS,
    reason=f"torch {torch.__version__} < {'.'.join(map(str, reference.GRAPH_CHECKS_SINCE))}: "
           "no fullgraph compile or export of the model (README, Building by hand)")


def _model(backend, stateful=False):
    torch.manual_seed(0)
    return BiLM(TINY, stateful=stateful, backend=backend)


def _loss(out):
    return sum((i + 1) * a.sum() for i, a in enumerate(out.activations))


def _assert_matches_eager(model, run, ids):
    """``run(ids)`` (a compiled or exported ``model``) against eager ``model``: outputs, mask and
    every parameter's gradient within float32 rounding (other products, other blocking)."""
    got = run(ids)
    expected = model(ids)
    assert torch.equal(got.mask, expected.mask)
    assert len(got.activations) == len(expected.activations)
    for a, b in zip(got.activations, expected.activations):  # no zip(strict=): Python 3.9
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if not torch.is_grad_enabled() or not got.activations[0].requires_grad:
        return
    model.zero_grad()
    _loss(got).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    _loss(expected).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def compiled_fused():
    """A fused model and its ``torch.compile(fullgraph=True, dynamic=True)`` with a frame counter."""
    torch._dynamo.reset()
    model = _model("fused")
    counter = CompileCounterWithBackend("aot_eager")
    return model, torch.compile(model, backend=counter, fullgraph=True, dynamic=True), counter


@needs_graph_checks
@needs_fused
def test_compile_fullgraph_dynamic_compiles_once_for_every_batch_and_length(compiled_fused):
    """The input checks branched on tensor values (graph breaks: fullgraph raised) and the token
    deduplication made shapes depend on the ids; now one graph serves every batch and length."""
    model, compiled, counter = compiled_fused
    _assert_matches_eager(model, compiled, batch_to_ids(BATCHES[0]))
    frames = counter.frame_count
    for sentences in BATCHES[1:]:
        _assert_matches_eager(model, compiled, batch_to_ids(sentences))
    assert counter.frame_count == frames  # no recompile for another batch size or sentence length


BAD_IDS = {  # name: (an edit of batch_to_ids(BATCHES[0]) that makes it bad, the error it gets)
    "ragged": (lambda ids: ids[0, 2].fill_(0), "padding before a real token"),
    "malformed": (lambda ids: ids[1, 0, 0].fill_(5), "not spelled as batch_to_ids spells tokens"),
    "range": (lambda ids: ids[2, 0, 3].fill_(300), r"must lie in 0\.\.261"),
}
IN_GRAPH = r".*bilm\.check_ids\(ids\)"  # what an assertion in a graph adds to the message


@needs_graph_checks
@needs_fused
@pytest.mark.parametrize("edit, message", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_compiled_model_still_checks_the_ids(compiled_fused, edit, message):
    """In the graph the checks of the ids' values are assertions: bad ids raise, not run.
    ``check_ids`` runs the same checks eagerly (what a CUDA server calls before the compiled model,
    where a failed assertion breaks the CUDA context): the eager forward's ValueError, and nothing
    on good ids."""
    model, compiled, _counter = compiled_fused
    ids = batch_to_ids(BATCHES[0])
    assert model.check_ids(ids) is None
    edit(ids)
    with pytest.raises(RuntimeError, match=message + IN_GRAPH):
        compiled(ids)
    with pytest.raises(ValueError, match=message) as checked:
        model.check_ids(ids)
    with pytest.raises(ValueError) as eager:
        model(ids)
    assert str(checked.value) == str(eager.value)


_INDUCTOR_RUN = """
import json, torch
from torch._dynamo.testing import CompileCounterWithBackend
from spacy_elmo import batch_to_ids
from tests.bilm.test_compile_export import BAD_IDS, BATCHES, _model

def report(**item):  # one line each: what ran before an abort is kept
    print(json.dumps(item), flush=True)

model = _model("fused")
counter = CompileCounterWithBackend("inductor")  # torch.compile's default backend
compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
with torch.no_grad():
    for sentences in BATCHES:
        ids = batch_to_ids(sentences)
        got, want = compiled(ids), model(ids)
        report(kind="batch", masks_equal=torch.equal(got.mask, want.mask), frames=counter.frame_count,
               diff=max(float((a - b).abs().max()) for a, b in zip(got.activations, want.activations))
                    if len(got.activations) == len(want.activations) else float("inf"))
    for name, (edit, _message) in BAD_IDS.items():
        ids = batch_to_ids(BATCHES[0])
        edit(ids)
        try:
            compiled(ids)
            report(kind="bad", name=name, raised=None)
        except Exception as err:
            report(kind="bad", name=name, raised=type(err).__name__, message=str(err))
"""


@pytest.fixture(scope="module")
def inductor_run():
    """The fused model compiled by inductor (C++ for the CPU), once for the module, in a child process
    (a failed assertion there aborted the process): its report lines, exit status and stderr."""
    done = subprocess.run([sys.executable, "-c", _INDUCTOR_RUN], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    items = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return items, done.returncode, done.stderr[-3000:]


@needs_graph_checks
@needs_fused
def test_inductor_outputs_equal_eager_for_every_batch_and_length(inductor_run):
    items, returncode, stderr = inductor_run
    batches = [item for item in items if item["kind"] == "batch"]
    assert len(batches) == len(BATCHES), stderr
    for item in batches:
        assert item["masks_equal"] and item["diff"] <= 1e-5, item
    assert batches[0]["frames"] == batches[-1]["frames"]  # no recompile for another batch size or length


@needs_graph_checks
@needs_fused
@pytest.mark.parametrize("name", BAD_IDS)
def test_inductor_keeps_the_checks_of_the_ids(inductor_run, name):
    """Inductor's C++ threw the failed ragged and malformed assertions inside an OpenMP parallel region:
    std::terminate ended the process instead of an error (``any_bad`` now asserts there through an
    operator that the compiled code runs in Python). Bad ids raise the in-graph error, not garbage."""
    items, returncode, stderr = inductor_run
    found = [item for item in items if item.get("name") == name]
    assert found, f"the compiled model's process ended with {returncode}: {stderr}"
    assert found[0]["raised"] == "RuntimeError", found[0]
    assert re.search(BAD_IDS[name][1] + IN_GRAPH, found[0]["message"], re.S), found[0]["message"]
    assert returncode == 0, stderr


@needs_graph_checks
@needs_fused
def test_compile_fullgraph_stateful_carries_states_as_eager():
    """A stateful model compiles with fullgraph=True: its check for states carried out of inference mode
    asked Tensor.is_inference(), which torch.compile cannot trace (the second call failed). A first call
    under inference mode, then calls with grad with fewer, more and as many rows as carried: outputs,
    gradients and carried states equal those of an eager model fed the same batches."""
    torch._dynamo.reset()
    compiled_model, eager = _model("fused", stateful=True), _model("fused", stateful=True)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(compiled_model, backend=counter, fullgraph=True, dynamic=True)
    batches = [BATCHES[0], BATCHES[1], BATCHES[2], [["k"], ["l", "m"], ["n", "o", "p", "q", "r"], ["s", "t"]]]
    for i, sentences in enumerate(batches):
        ids = batch_to_ids(sentences)
        with torch.inference_mode(i == 0):
            got, expected = compiled(ids), eager(ids)
        for a, b in zip(got.activations, expected.activations):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(compiled_model.carried_states, eager.carried_states):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        if i == 0:
            continue
        _loss(got).backward()
        _loss(expected).backward()
        for (name, p), q in zip(compiled_model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
            p.grad = q.grad = None
    frames = counter.frame_count
    compiled(batch_to_ids(BATCHES[2]))  # as many rows again, another length: no recompile
    assert counter.frame_count == frames


@needs_graph_checks
def test_compile_fullgraph_reference():
    """The reference backend compiles without graph breaks too (one sentence length: its time
    loop is unrolled, so each new length compiles again; the README says to use the fused one)."""
    torch._dynamo.reset()
    model = _model("reference")
    _assert_matches_eager(model, torch.compile(model, backend="aot_eager", fullgraph=True), batch_to_ids(SHORT))


@needs_graph_checks
@needs_fused
def test_export_dynamic_batch_and_time_save_and_load(tmp_path):
    """torch.export failed on the data-dependent checks; torch.export.save refused the output
    namedtuple. The program runs on other batch sizes and lengths, saved and loaded again, also in a
    fresh process through load_exported (the package imports nothing until used: the fused ops and the
    output type are registered by it)."""
    model = _model("fused")
    program = torch.export.export(model, (batch_to_ids(BATCHES[0]),),
                                  dynamic_shapes=({0: Dim("batch"), 1: Dim("time")},))
    path = tmp_path / "bilm.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path).module()
    with torch.no_grad():
        for sentences in BATCHES:
            _assert_matches_eager(model, program.module(), batch_to_ids(sentences))
            _assert_matches_eager(model, loaded, batch_to_ids(sentences))
    expected = model(batch_to_ids(BATCHES[1])).activations[-1]
    code = (
        "import sys, torch\n"
        "from spacy_elmo import batch_to_ids\n"
        "from spacy_elmo.bilm import load_exported\n"
        f"out = load_exported(sys.argv[1]).module()(batch_to_ids({BATCHES[1]!r}))\n"
        "torch.save(out.activations[-1], sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "out.pt")], check=True)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected, rtol=1e-5, atol=1e-6)


@needs_graph_checks
def test_export_reference_needs_a_fixed_length():
    """The reference LSTM's Python loop is unrolled for the traced length: a dynamic time dimension
    gave PyTorch's 'Constraints violated (time)'; now an error that says why and what to do. A fixed
    length with a dynamic batch exports."""
    model = _model("reference")
    ids = batch_to_ids(SHORT)
    with pytest.raises(RuntimeError, match=r"reference backend a dynamic time dimension.*backend='fused'"):
        torch.export.export(model, (ids,), dynamic_shapes=({0: Dim("batch"), 1: Dim("time")},))
    program = torch.export.export(model, (ids,), dynamic_shapes=({0: Dim("batch")},))
    with torch.no_grad():
        _assert_matches_eager(model, program.module(), batch_to_ids([["d", "e"], ["f"], ["g", "h"]]))


@needs_export_flag
def test_before_graph_checks_export_names_the_torch_it_needs(monkeypatch):
    """Before torch 2.11 (as stubbed here) export failed with torch's error about a data-dependent branch in
    the checks of the ids; now one that names the release it needs and what runs instead."""
    monkeypatch.setattr(reference, "GRAPH_CHECKS", False)
    with pytest.raises(RuntimeError, match=rf"torch.export of BiLM needs torch >= 2\.11 \(this is torch "
                                           rf"{re.escape(torch.__version__)}\).*without fullgraph=True"):
        torch.export.export(_model("reference"), (batch_to_ids(SHORT),))


@needs_export_flag
def test_export_of_a_stateful_model_is_refused():
    """The exported program silently dropped the carried states: every call started afresh."""
    model = _model("reference", stateful=True)
    with pytest.raises(RuntimeError, match=r"cannot export BiLM\(stateful=True\)"):
        torch.export.export(model, (batch_to_ids(BATCHES[0]),))


def test_torchscript_is_refused_with_the_way_out():
    """torch.jit.script failed deep in ops.char_cnn's *args; torch.jit.trace failed its sanity
    check on the fused path and on the reference path recorded one sentence length and no checks
    of the ids. Both now point to torch.compile / torch.export."""
    model = _model("reference")
    with pytest.raises(RuntimeError, match=r"torch.jit.script does not support BiLM.*torch.compile"):
        torch.jit.script(model)
    with pytest.raises(RuntimeError, match=r"torch.jit.trace does not support BiLM.*torch.compile"):
        torch.jit.trace(model, (batch_to_ids(BATCHES[0]),))


@pytest.mark.parametrize("backend", ["reference", pytest.param("fused", marks=needs_fused)])
def test_vmap_over_the_model_is_refused_with_the_way_out(backend):
    """torch.func.vmap over the biLM failed with torch's bare "Cannot access data pointer of Tensor that
    doesn't have storage" (the checks of the ids bring their values to the host). Every entry point that
    takes ids refuses batched ones, naming the batch the biLM takes; the unbatched ids still run."""
    model = _model(backend)
    ids = batch_to_ids(BATCHES[0])
    stacked = torch.stack([ids, ids.flip(0)])
    mask = (stacked > 0).any(-1)
    calls = {
        "forward": lambda i: model(i).activations[-1],
        "check_ids": lambda i: model.check_ids(i),
        "encode_tokens": lambda i, m: model.encode_tokens(i, m),
    }
    for name, call in calls.items():
        args = (stacked, mask) if name == "encode_tokens" else (stacked,)
        with pytest.raises(RuntimeError, match=r"vmap over BiLM is not supported.*\(batch, time, 50\).*directly"):
            torch.func.vmap(call)(*args)
    torch.testing.assert_close(model(stacked[1]).activations[-1], model(ids.flip(0)).activations[-1])


def test_autocast_checks_trace_into_one_graph():
    """torch 2.4 to 2.11 could not trace ``torch.amp.is_autocast_available`` (which every forward asks): a
    graph break, so fullgraph compiles and exports of every model failed there. Its answer is a constant to
    the tracer now; whether autocast is on still is not (the compiled function follows it)."""
    def step(x):
        return x * 2 if reference.autocast_on(x.device.type) else x + 1

    compiled = torch.compile(step, backend="eager", fullgraph=True)
    x = torch.ones(2)
    assert torch.equal(compiled(x), x + 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(compiled(x), x * 2)
    assert torch.equal(compiled(x), x + 1)
    assert compiled(torch.ones(2, device="meta")).device.type == "meta"  # meta has no autocast


class _ExportProbe(torch.nn.Module):
    def forward(self, x):
        return x + 1 if reference.exporting() else x - 1


@needs_export_flag
def test_exporting_is_true_under_export_only():
    """torch 2.7 to 2.11 fold ``torch.compiler.is_exporting()`` to True under every torch.compile: compiled
    on the CPU by inductor, bad ids then aborted the process (``test_inductor_keeps_the_checks_of_the_ids``).
    ``exporting()`` is True in torch.export's trace only, strict or not, and False in eager mode and under
    torch.compile."""
    probe, x = _ExportProbe(), torch.zeros(2)
    torch._dynamo.reset()
    assert torch.equal(probe(x), x - 1)
    assert torch.equal(torch.compile(probe, backend="eager", fullgraph=True)(x), x - 1)
    for strict in (False, True):
        assert torch.equal(torch.export.export(probe, (x,), strict=strict).module()(x), x + 1), strict



@needs_export_flag
def test_exporting_ignores_is_exporting_folded_to_true_under_compile(monkeypatch):
    """torch 2.7 to 2.11's ``is_exporting()`` is True under every torch.compile (as stubbed here):
    ``exporting()`` must not follow it, or inductor gets ``torch._assert_async`` on the CPU again."""
    # called eagerly: stubbed, is_exporting() would also make torch.compile itself step aside
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    assert reference.exporting() is False


def test_autocast_available_is_marked_as_the_decorator_marks_it():
    """reference.py sets what ``assume_constant_result`` sets, without importing torch._dynamo when the
    package is imported; this torch's decorator must still mean that attribute."""
    marked = torch.compiler.assume_constant_result(lambda device_type: True)
    assert marked._dynamo_marked_constant is True
    assert reference.autocast_available._dynamo_marked_constant is True


def test_importing_the_package_does_not_import_dynamo():
    """``torch.compiler.assume_constant_result`` imported torch._dynamo at the package's import: about
    1.2 s more for every process (the CLI, spaCy's entry points, DDP and tokenizer workers)."""
    code = "import sys, spacy_elmo, spacy_elmo.ops.reference; print('torch._dynamo' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_before_graph_checks_a_compiled_model_checks_the_ids_in_python(monkeypatch):
    """Before torch 2.11 (as stubbed here) the checks stay out of the graph: a compiled model breaks the
    graph there and raises the eager forward's ValueError on bad ids (2.4 and 2.5's inductor dropped
    the in-graph check: bad ids ran), and a fullgraph compile fails instead of running without it."""
    monkeypatch.setattr(reference, "GRAPH_CHECKS", False)
    torch._dynamo.reset()
    model = _model("reference")
    ids = batch_to_ids(SHORT)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="eager")(ids).activations[-1],
                                   model(ids).activations[-1])
        ids[0, 0, 3] = 300  # outside the character table
        with pytest.raises(ValueError) as eager:
            model(ids)
        torch._dynamo.reset()
        with pytest.raises(ValueError) as compiled:
            torch.compile(model, backend="eager")(ids)
        assert str(compiled.value) == str(eager.value)
        torch._dynamo.reset()
        with pytest.raises(Exception) as full:
            torch.compile(model, backend="eager", fullgraph=True)(ids)
        assert not isinstance(full.value, ValueError)  # torch's refusal of the graph break, not a run


@needs_graph_checks
@needs_fused
def test_load_exported_without_the_extension(monkeypatch, tmp_path):
    """A fused program calls torch.ops.spacy_elmo: where the extension is missing (here: said to be, in a
    process that has registered the ops) load_exported still loads a reference-backend program, which calls
    none, says of a fused one that it needs the extension (torch's error names no cause), and leaves a damaged
    file to torch's own error, whatever the backend it was exported with."""
    from spacy_elmo import ops
    from spacy_elmo.bilm import load_exported
    from spacy_elmo.bilm.exported import calls_fused_ops

    models = {backend: _model(backend) for backend in ("reference", "fused")}
    for backend, model in models.items():
        torch.export.save(torch.export.export(model, (batch_to_ids(SHORT),)), tmp_path / f"{backend}.pt2")
        (tmp_path / f"{backend}-damaged.pt2").write_bytes((tmp_path / f"{backend}.pt2").read_bytes()[:-200])
    assert calls_fused_ops(tmp_path / "fused.pt2") and not calls_fused_ops(tmp_path / "reference.pt2")
    with torch.no_grad():
        run = load_exported(tmp_path / "fused.pt2").module()
        _assert_matches_eager(models["fused"], run, batch_to_ids(SHORT))
    monkeypatch.setattr(ops, "fused_available", lambda: False)
    with torch.no_grad():
        run = load_exported(tmp_path / "reference.pt2").module()
        _assert_matches_eager(models["reference"], run, batch_to_ids(SHORT))
    with pytest.raises(RuntimeError, match=r"fused\.pt2 is a biLM exported with the fused backend.*not available here"):
        load_exported(tmp_path / "fused.pt2")
    (tmp_path / "text.pt2").write_text("no archive\n")
    assert not calls_fused_ops(tmp_path / "text.pt2")  # no BadZipFile of its own: torch's load says what it is
    for name in ("reference-damaged.pt2", "fused-damaged.pt2"):
        with pytest.raises(RuntimeError) as refused:
            load_exported(tmp_path / name)
        assert "exported with the fused backend" not in str(refused.value), name


def test_calls_fused_ops_reads_only_the_programs_graphs(tmp_path):
    """Only a program's graph (models/*.json) tells whether it calls the fused kernels: another JSON member (the
    extra_files a user saved with it, say) that mentions them does not make a reference program need the extension."""
    import zipfile

    from spacy_elmo.bilm.exported import calls_fused_ops

    for members, fused in (({"p/models/model.json": b'{"target": "torch.ops.spacy_elmo.lstm"}'}, True),
                           ({"p/models/model.json": b'{"target": "torch.ops.aten.mm"}',
                             "p/extra/notes.json": b'"exported without torch.ops.spacy_elmo.lstm"'}, False)):
        path = tmp_path / f"{fused}.pt2"
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        assert calls_fused_ops(path) is fused
