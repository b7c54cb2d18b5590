"""Where a warning points (user_stacklevel): the user's line, or under a command the command's own function."""

import functools
import warnings

import pytest


def _function(module: str, filename: str, source: str):
    """``run`` of ``source`` compiled as if it were a function of ``module`` in ``filename``."""
    namespace = {"__name__": module}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["run"]


WARN = ("import warnings\nfrom spacy_elmo.pipeline.callers import user_stacklevel\n"
        "def run():\n    warnings.warn('w', UserWarning, stacklevel=user_stacklevel())\n")
CALL = "def run(inner):\n    inner()\n"


@pytest.mark.parametrize(
    "chain, expected",
    [
        # spacy train / spacy debug model: typer dispatches to the command, which calls the library: the command's
        # function (it pointed at typer/main.py, which says nothing of the command)
        (("typer.main", "spacy.cli.train", "spacy.training.loop"), "spacy/cli/train.py"),
        (("click.core", "typer.main", "spacy_elmo.cli.pretrain"), "spacy_elmo/cli/pretrain.py"),
        # the user's own call of a command's function, and typer without a command of ours: as before
        (("spacy.cli.train", "spacy.training.loop"), __file__),
        (("typer.main", "spacy.training.loop"), "typer/main.py"),
    ],
)
def test_a_warning_under_a_command_points_at_the_command(chain, expected):
    warn = _function("spacy_elmo.pipeline.warns", "spacy_elmo/pipeline/warns.py", WARN)
    call = warn
    for module in reversed(chain):  # the outermost first in chain: wrapped last
        call = functools.partial(_function(module, module.replace(".", "/") + ".py", CALL), call)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    assert [w.filename for w in caught] == [expected]
