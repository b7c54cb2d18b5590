"""Progress bars (tqdm) that suit where they are written: a terminal, a notebook, or a log file.

On a terminal a bar redraws itself in place ten times a second. Written to anything else (``nohup``,
Slurm's output file, a CI log, ``2> log``) every redraw stays in the file: about 90 bytes a redraw, some
78 MB for a day of pretraining (computed from a 300-step run's 53 redraws in 4.8 KB, not measured over a
day). There a bar is redrawn once every :data:`LOG_INTERVAL` seconds, each redraw a line of its own
(:class:`_LogBar`: no ``\\r``, no line of spaces erasing it before a message, its last state once).
A Jupyter kernel's stderr is no terminal either, but redraws in place: it keeps tqdm's pace.
"""

import sys

from tqdm import tqdm

#: Seconds between the redraws of a bar whose stream is not a terminal.
LOG_INTERVAL = 60.0


def _redraws_in_place(stream) -> bool:
    """Whether ``stream`` shows a bar's redraws over each other: a terminal, or a Jupyter kernel's stream
    (ipykernel's ``OutStream``, whose ``isatty()`` is False)."""
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return True
    isatty = getattr(stream, "isatty", None)
    return isatty is not None and bool(isatty())


class _LogBar(tqdm):
    """A bar written to a log: each redraw a line ended by ``\\n``. tqdm's bar redraws one line in place
    (``\\r``), erases it with a line of spaces before a message (``tqdm.write``: pretrain's held-out
    perplexity) and draws it again on closing: in a file, lines of spaces and the last line twice."""

    _shown = None  # (position, postfix) of the last line written: a redraw that says nothing new is not written

    @staticmethod
    def status_printer(file):
        def print_status(line: str) -> None:
            if line:  # "" is tqdm's erase: nothing in a log to erase
                file.write(line + "\n")
                getattr(file, "flush", lambda: None)()

        return print_status

    def clear(self, nolock=False):
        """Nothing to erase: the lines written stay, the message goes below them."""

    def display(self, msg=None, pos=None):
        if msg == "":  # an erase (a close with leave=False): a log keeps its lines
            return False
        if msg is None:
            shown = (self.n, self.postfix)
            if shown == self._shown:  # tqdm.write's redraw, then the close's, of a bar that has not moved
                return True
            self._shown = shown
        return super().display(msg, pos)

    def close(self):
        if not getattr(self, "disable", True) and self.leave and hasattr(self, "last_print_t"):
            self._ema_dt = lambda: None  # as tqdm's close: the overall rate on the last line
            self.display()  # the last state, unless it is the last line already
        self.leave = False  # tqdm's close would draw the bar again and end the line: here every line is ended
        super().close()


def progress_bar(iterable=None, **kwargs):
    """``tqdm(iterable, **kwargs)`` on stderr, redrawn at most every :data:`LOG_INTERVAL` seconds when
    stderr is a log (see the module's docstring)."""
    if not _redraws_in_place(sys.stderr):
        # maxinterval too: tqdm's monitor thread otherwise forces a redraw every 10 s of a slow loop. And miniters 1
        # (the clock read at every update, not every N updates as tqdm adapts N): the monitor redraws only a bar whose
        # miniters is above 1, and its redraw left the last redraw's step and time as they were, so the next update
        # drew the bar again, one step on in the same second.
        kwargs["mininterval"] = max(kwargs.get("mininterval", 0.1), LOG_INTERVAL)
        kwargs["maxinterval"] = max(kwargs.get("maxinterval", 10.0), LOG_INTERVAL)
        kwargs["miniters"] = 1
        # No cursor moves in a log: a bar opened below another (pretrain's held-out evaluation) is written on
        # its own lines, as every bar there, not with the terminal's escape codes; and its last state stays.
        kwargs["position"] = 0
        if kwargs.get("leave", True) is None:
            kwargs["leave"] = True
        return _LogBar(iterable, **kwargs)
    return tqdm(iterable, **kwargs)
