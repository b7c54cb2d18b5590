"""Ctrl-C and SIGTERM stopping a long command (pretrain, embed, fit-state, export) as one: what it wrote so far
kept or removed as on Ctrl-C, the way on said, and exit status 128 + the signal (130, 143).

SIGTERM (``kill``, Slurm's ``scancel`` or time limit and preemption, ``docker stop``, ``timeout``, systemd, torchrun
stopping its workers) ended a command at once by Python's default action: exit status -15, no word of what was kept,
and its lock and temporary files left behind. Inside :func:`signals_stop` it raises :class:`Terminated`, a
KeyboardInterrupt, so every ``except KeyboardInterrupt`` and ``finally`` that tidies up after Ctrl-C runs for it too.
"""

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Optional

import typer

from ..errors import Errors
from .app import COMMAND_LINE, warn


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, Slurm's ``scancel`` or time limit, a container stop, torchrun stopping its
    workers), raised where the process is: the run stops as on Ctrl-C, temporary files removed."""


class Stop:
    """The signal (SIGINT or SIGTERM) that stopped this process, None while none came. While ``reporting``
    (the run has ended), a signal is recorded, not raised: it would escape the handler that reports the end.
    ``ignore_at_exit``: this is the command line's main thread, and the process ends with the run. ``after_complete``:
    the first signal that came after :meth:`complete`, which :func:`signals_stop` delivers again to an in-process
    caller's handler once the block ends."""

    def __init__(self, ignore_at_exit: bool = False) -> None:
        self.signum: Optional[int] = None
        self.reporting = False
        self.ignore_at_exit = ignore_at_exit
        self.completed = False
        self.after_complete: Optional[int] = None

    def handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
        if self.completed and self.after_complete is None:
            self.after_complete = signum
        if not self.reporting:
            raise self.interrupt()

    def check(self, step: int, loss: float) -> None:
        """Called after every optimizer step (``train``'s ``on_step``): stop at this step boundary if a signal
        came whose exception Python swallowed, as it does when the handler runs inside a finalizer (a
        ``__del__`` or a generator closed by the garbage collector: "Exception ignored in ..."), where the
        run went on training as though nothing had come."""
        if self.signum is not None:  # (train calls it, so never while the end is reported)
            raise self.interrupt()

    def interrupt(self) -> KeyboardInterrupt:
        """The exception of the signal that came: :class:`Terminated` for SIGTERM, KeyboardInterrupt for Ctrl-C."""
        return Terminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()

    def signal_of(self, err: BaseException) -> int:
        """The signal that stopped the command with ``err``: the one that came, else the one ``err`` stands for
        (:class:`Terminated`: SIGTERM; a KeyboardInterrupt: Ctrl-C, also one Python's own handler raised before
        this block's was set)."""
        return self.signum or (signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT)

    def end(self, err: KeyboardInterrupt, message: str) -> NoReturn:
        """Say ``message`` (what the stopped command kept, how to go on; yellow on stderr) and exit with 128 + the
        signal that stopped it (130 Ctrl-C, 143 SIGTERM): one command's end (embed, fit-state, export), where
        pretrain's says it once for the ranks of torchrun. A signal from here on is recorded, not raised."""
        self.reporting = True  # first: a signal now must not escape the handler that called this
        warn(message)
        self.exit(self.signal_of(err), err)

    def exit(self, signum: int, err: BaseException) -> NoReturn:
        """Exit with 128 + ``signum``. Ctrl-C under torchrun comes twice (the terminal's to the whole process
        group, then torchrun's forwarded copy): a second one in the process's exit (atexit callbacks, the
        workers' joins) printed "Exception ignored in atexit callback ... KeyboardInterrupt" or killed it by
        SIGINT instead of 130, so the command line ignores both signals from here on."""
        self.ignore_signals()
        raise typer.Exit(128 + signum) from err

    def complete(self) -> None:
        """The command's result is written whole (export's OUT_DIR, fit-state's state): a signal from here on has
        nothing left to stop or tidy up. Recorded, not raised (it said "interrupted, rerun" of a complete result,
        exit 143), and on the command line ignored until the process exits, with status 0: Python's default
        action, back once the block ended, killed the process by the signal (-15) after it said what it wrote.
        In-process (not the command line) the signal is the caller's: delivered to its handler after the block."""
        self.reporting = True
        self.completed = True
        self.ignore_signals()

    def ignore_signals(self) -> None:
        """On the command line: ignore Ctrl-C and SIGTERM from here on, the process exiting (also a rank of torchrun
        exiting with an error: torchrun stops the other ranks, SIGTERM, as soon as one exits, and a rank still
        exiting with the same error was reported killed, exit code -15)."""
        if self.ignore_at_exit:
            for stopping in STOPPING:
                signal.signal(stopping, signal.SIG_IGN)


#: The signals that stop a run.
STOPPING = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_stop(command_line: bool = False):
    """A :class:`Stop` whose handler takes Ctrl-C (SIGINT: KeyboardInterrupt) and SIGTERM (:class:`Terminated`;
    it ended the process silently, with no word of what was kept or how to go on) inside the block. Only the
    main thread may set handlers: elsewhere, as it was. A signal its starter ignores stays ignored (``cmd &``
    in a script: the script's Ctrl-C is not for it; ``nohup``). ``command_line``: the process ends with the
    block (main()), so :meth:`Stop.exit` may leave the signals ignored; the handlers are restored after the
    block only where they are still the block's own. Elsewhere (an in-process caller) a signal that came after
    :meth:`Stop.complete` is raised again once they are: the caller's handler, not this finished command's, takes it."""
    main_thread = threading.current_thread() is threading.main_thread()
    stop = Stop(ignore_at_exit=command_line and main_thread)
    if not main_thread:
        yield stop
        return
    handler = stop.handle
    previous = {signum: signal.signal(signum, handler) for signum in STOPPING
                if signal.getsignal(signum) != signal.SIG_IGN}
    try:
        yield stop
    finally:
        for signum, before in previous.items():
            if signal.getsignal(signum) is handler:
                signal.signal(signum, before)
        if not command_line and stop.after_complete is not None:
            signal.raise_signal(stop.after_complete)


@contextmanager
def interruption_ends(ctx: typer.Context, command: str, rerun: Callable[[], str] = str) -> Iterator[Stop]:
    """Around the work of ``command`` (fit-state, export), whose result is written atomically: Ctrl-C or SIGTERM
    inside ends it with :data:`Errors.E_INTERRUPTED` (rerun it) and exit status 130 or 143, once what it held is
    released (its lock) and its temporary files removed. ``rerun()``: what the rerun needs besides the same
    arguments, read once stopped ("": nothing; export's --overwrite, where OUT_DIR holds files now). embed and
    pretrain say what they kept instead."""
    with signals_stop(command_line=ctx.obj == COMMAND_LINE) as stop:
        try:
            yield stop
        except KeyboardInterrupt as err:
            stop.reporting = True  # first: a signal while rerun() looks at the disk must not escape this handler
            stop.end(err, Errors.E_INTERRUPTED.format(command=command, rerun=rerun()))
