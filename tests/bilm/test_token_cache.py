"""TokenCache.lookup: the row indices of wrapped sentences (no spaCy)."""

import pytest
import torch

from spacy_elmo import BiLM, BiLMConfig
from spacy_elmo.bilm.token_cache import TokenCache, run_rows
from tests.threads import meeting, run_in_threads

TINY = dict(projection_dim=8, cell_dim=16, filters=[[1, 4], [2, 4]])


def _tiny_bilm() -> BiLM:
    torch.manual_seed(0)
    return BiLM(BiLMConfig(**TINY), backend="reference").eval()


def _assert_cached_rows_equal_whole_bilm(bilm, rows, cache, whole_rows=None):
    """``run_rows`` through ``cache`` gives the whole biLM's layers of ``whole_rows`` (default: ``rows``)."""
    with torch.no_grad():
        cached = run_rows(bilm, rows, cache).activations
        whole = run_rows(bilm, rows if whole_rows is None else whole_rows).activations
    for a, b in zip(cached, whole):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _per_row(cache: TokenCache, rows):
    """The index built row by row (how lookup built it before it wrote whole arrays)."""
    T = max((len(r) for r in rows), default=0)
    idx = torch.full((len(rows), T + 2), 2, dtype=torch.long)
    for b, row in enumerate(rows):
        idx[b, 0] = 0
        idx[b, 1 : len(row) + 1] = torch.tensor([cache.index[t] for t in row], dtype=torch.long)
        idx[b, len(row) + 1] = 1
    return idx


def test_lookup_index_layout():
    bilm = _tiny_bilm()
    cache = TokenCache(50)
    batches = [
        [["the", "bank", "of", "the", "river"], ["a"], [], ["bank", "bank", "x", "y", "z", "the", "."]],
        [["new", "words", "the"], ["river"]],
        [[]],
        [],
        [["only"]],
    ]
    with torch.no_grad():
        for rows in batches:
            idx = cache.lookup(bilm, rows, torch.device("cpu"))
            assert idx.dtype == torch.long and torch.equal(idx, _per_row(cache, rows))
            for b, row in enumerate(rows):  # <S>, the tokens, </S>, padding
                assert idx[b, 0] == 0 and idx[b, len(row) + 1] == 1 and (idx[b, len(row) + 2 :] == 2).all()
        # a full cache starts over: the index is rebuilt for this batch only
        rows = [[f"w{i}" for i in range(30)], [f"v{i}" for i in range(20)]]
        idx = cache.lookup(bilm, rows, torch.device("cpu"))
        assert len(cache.index) == 50 and torch.equal(idx, _per_row(cache, rows))


def test_cached_rows_equal_whole_bilm():
    rows = [["The", "bank", "of", "the", "river", "."], ["It", "rose"], ["the"]]
    _assert_cached_rows_equal_whole_bilm(_tiny_bilm(), rows, TokenCache(100))


def test_rows_are_taken_as_batch_to_ids_takes_sentences():
    """With a cache, a string row ran as its characters and a generator row as an empty row
    (lookup read it three times); batch_to_ids, the path without a cache, refuses the first."""
    bilm = _tiny_bilm()
    with torch.no_grad():
        for cache in (None, TokenCache(100)):
            with pytest.raises(TypeError, match=r"sentence 0 is a str. Tokenize first"):
                run_rows(bilm, ["The bank"], cache)
    _assert_cached_rows_equal_whole_bilm(bilm, [iter(["The", "bank"]), ("a",)], TokenCache(100),
                                         whole_rows=[["The", "bank"], ["a"]])


def test_a_cache_built_under_inference_mode_is_used_outside_it():
    """'Inplace update to inference tensor outside InferenceMode' at the first new token."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    with torch.inference_mode():
        run_rows(bilm, [["The", "bank"]], cache)
    _assert_cached_rows_equal_whole_bilm(bilm, [["The", "river"], ["bank"]], cache)


def test_threads_encoding_new_tokens_at_once():
    """Two threads each meeting new tokens: both took the rows after the index as theirs and wrote
    their vectors there, so the index gave one thread's tokens the other's vectors from then on
    (and a thread that started the matrix over under another's read crashed or read zeros)."""
    bilm = _tiny_bilm()
    cache = TokenCache(100)
    with torch.no_grad():
        run_rows(bilm, [["The"]], cache)  # the matrix exists: each thread below only adds rows
    meet, encode = meeting(), bilm.encode_tokens

    def encode_together(*args):
        meet()  # both threads inside lookup, each with the rows it chose
        return encode(*args)

    bilm.encode_tokens = encode_together
    rows = [[["bank", "river"]], [["money", "rates", "rose"]]]

    def cached(batch):
        with torch.no_grad():
            return run_rows(bilm, batch, cache).activations

    got = run_in_threads(cached, [(batch,) for batch in rows])
    bilm.encode_tokens = encode
    for batch, layers in zip(rows, got):  # what each thread got, and what the cache gives the same rows afterwards
        with torch.no_grad():
            whole = run_rows(bilm, batch).activations
        for a, b in zip(layers, whole):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        _assert_cached_rows_equal_whole_bilm(bilm, batch, cache)
