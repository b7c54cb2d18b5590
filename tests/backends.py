"""The backends a test runs on here: the reference path, and the fused kernels when the compiled extension
loads; when it does not, the fused cases are skipped with the reason (reported, not silently left out)."""

import pytest

from spacy_elmo.ops.extension import load_extension

_, _REASON = load_extension()

BACKENDS = ["reference", pytest.param("fused", marks=pytest.mark.skip(reason=f"spacy_elmo._C did not load: {_REASON}"))
            if _REASON else "fused"]
