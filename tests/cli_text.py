"""Running typer commands in tests and reading their output."""

from typer.testing import CliRunner

#: The runners' commands see a wide terminal: typer's error box (rich) wraps at the terminal's width, 80 columns in
#: CliRunner, and folds a word longer than its line inside it: a long tmp_path (/tmp/pytest-of-root/pytest-1261/...)
#: was cut mid-path, which no whitespace normalising (plain) undoes, so a message check passed or failed with
#: pytest's temp-dir number. A test of the wrapping itself passes its own COLUMNS to ``invoke``.
WIDE = {"COLUMNS": "1000"}

try:
    runner = CliRunner(mix_stderr=False, env=WIDE)  # click < 8.2 (typer 0.15.4) mixes stderr into stdout unless told
except TypeError:  # click 8.2 and typer's own copy of it keep them apart always
    runner = CliRunner(env=WIDE)
#: A runner whose ``result.output`` holds stderr's text too in every click (``runner``'s, in click < 8.2, stdout's only)
mixed_runner = CliRunner(env=WIDE)


def plain(output: str) -> str:
    """A command's output without the error box's borders and line breaks."""
    return " ".join(output.replace("│", " ").split())


def ended(result, status: int, message: str) -> None:
    """The command exited with ``status`` after ``message`` on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == status, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert message in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
