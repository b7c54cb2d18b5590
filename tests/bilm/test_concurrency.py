"""The fused CPU kernels keep per-thread work buffers and a process-wide list of recycled blocks:
models used from several Python threads at once, after torch.set_num_threads changes and in a
forked DataLoader worker give the numbers of a plain serial call."""

import copy
import threading

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig, batch_to_ids
from spacy_elmo.ops import fused_available

pytestmark = pytest.mark.skipif(not fused_available(), reason="the compiled extension is not built")

SENTENCES = [["w%d" % (i % 37) for i in range(60)], ["The", "bank"], [], ["x" * 60, "밥"]]


def tiny(seed):
    torch.manual_seed(seed)
    config = BiLMConfig(projection_dim=16, cell_dim=32, filters=[(1, 8), (2, 8), (3, 16)], n_highway=1,
                        char_embedding_dim=8)
    return BiLM(config, backend="fused")


def forward_backward(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(ids)
    sum((a * a).sum() for a in out.activations).backward()
    return [a.detach() for a in out.activations], [p.grad.clone() for p in model.parameters()]


def assert_same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(w.abs().max())))


def test_threads_training_one_model_and_another_at_once():
    ids = batch_to_ids(SENTENCES)
    first, second = tiny(0), tiny(1)
    want = {id(m): forward_backward(m, ids) for m in (first, second)}
    # one model's parameters shared by two threads (separate graphs), plus another model
    models = [first, copy.deepcopy(first), second]
    expected = [want[id(first)], want[id(first)], want[id(second)]]
    errors = []

    def worker(model, expect):
        try:
            for _ in range(4):
                outs, grads = forward_backward(model, ids)
                assert_same(outs, expect[0])
                assert_same(grads, expect[1])
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(m, e)) for m, e in zip(models[1:], expected[1:])]
    threads.append(threading.Thread(target=lambda: [first(ids) for _ in range(4)]))  # forward-only, same model
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_thread_count_changes_between_calls():
    ids = batch_to_ids(SENTENCES)
    model = tiny(2).eval()
    with torch.no_grad():
        want = model(ids).activations
    before = torch.get_num_threads()
    try:
        for n in (1, 3, 1, before):
            torch.set_num_threads(n)
            with torch.no_grad():
                assert_same(model(ids).activations, want)
    finally:
        torch.set_num_threads(before)


class _Embedded(torch.utils.data.Dataset):
    def __init__(self, model):
        self.model = model

    def __len__(self):
        return 2

    def __getitem__(self, index):
        with torch.no_grad():
            return torch.stack(self.model(batch_to_ids(SENTENCES)).activations)


def test_forked_dataloader_worker_after_the_kernels_ran():
    """fork after the extension loaded and its buffers and recycled blocks were filled."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    model = tiny(3).eval()
    forward_backward(model.train(), batch_to_ids(SENTENCES))  # fill buffers and recycled blocks
    model.eval()
    with torch.no_grad():
        want = torch.stack(model(batch_to_ids(SENTENCES)).activations)
    loader = torch.utils.data.DataLoader(_Embedded(model), batch_size=None, num_workers=1,
                                         multiprocessing_context="fork")
    for got in loader:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
