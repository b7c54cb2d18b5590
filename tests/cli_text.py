"""Reading a typer command's output in tests."""


def plain(output: str) -> str:
    """A command's output without the error box's borders and line breaks."""
    return " ".join(output.replace("│", " ").split())
