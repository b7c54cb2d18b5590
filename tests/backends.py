"""The backends a test runs on here: the reference path, and the fused kernels when the compiled extension loads."""

from spacy_elmo.ops import fused_available

BACKENDS = ["reference"] + (["fused"] if fused_available() else [])
