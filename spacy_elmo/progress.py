"""Progress bars (tqdm) that suit where they are written: a terminal, a notebook, or a log file.

On a terminal a bar redraws itself in place ten times a second. Written to anything else (``nohup``,
Slurm's output file, a CI log, ``2> log``) every redraw stays in the file, ``\\r``-separated: about
90 bytes a redraw, some 78 MB for a day of pretraining (computed from a 300-step run's 53 redraws in
4.8 KB, not measured over a day). There a bar is redrawn once every :data:`LOG_INTERVAL` seconds.
A Jupyter kernel's stderr is no terminal either, but redraws in place: it keeps tqdm's pace.
"""

import sys

#: Seconds between the redraws of a bar whose stream is not a terminal.
LOG_INTERVAL = 60.0


def _redraws_in_place(stream) -> bool:
    """Whether ``stream`` shows a bar's redraws over each other: a terminal, or a Jupyter kernel's stream
    (ipykernel's ``OutStream``, whose ``isatty()`` is False)."""
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return True
    isatty = getattr(stream, "isatty", None)
    return isatty is not None and bool(isatty())


def progress_bar(iterable=None, **kwargs):
    """``tqdm(iterable, **kwargs)`` on stderr, redrawn at most every :data:`LOG_INTERVAL` seconds when
    stderr is a log (see the module's docstring)."""
    from tqdm import tqdm

    if not _redraws_in_place(sys.stderr):
        # maxinterval too: tqdm's monitor thread otherwise forces a redraw every 10 s of a slow loop.
        kwargs["mininterval"] = max(kwargs.get("mininterval", 0.1), LOG_INTERVAL)
        kwargs["maxinterval"] = max(kwargs.get("maxinterval", 10.0), LOG_INTERVAL)
        # No cursor moves in a log: a bar opened below another (pretrain's held-out evaluation) is written on
        # its own lines, as every bar there, not with the terminal's escape codes; and its last state stays.
        kwargs["position"] = 0
        if kwargs.get("leave", True) is None:
            kwargs["leave"] = True
    return tqdm(iterable, **kwargs)
