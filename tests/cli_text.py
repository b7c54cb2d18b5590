"""Running typer commands in tests and reading their output."""

from typer.testing import CliRunner

try:
    runner = CliRunner(mix_stderr=False)  # click < 8.2 (typer 0.15.4) mixes stderr into stdout unless told
except TypeError:  # click 8.2 and typer's own copy of it keep them apart always
    runner = CliRunner()


def plain(output: str) -> str:
    """A command's output without the error box's borders and line breaks."""
    return " ".join(output.replace("│", " ").split())


def ended(result, status: int, message: str) -> None:
    """The command exited with ``status`` after ``message`` on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == status, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert message in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
