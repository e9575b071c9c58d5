"""The Python API's progress displays, chosen by `progress=`: rich, tqdm, plain lines, silence
or a callback, each scoped to one call.

Notebooks are why this module exists. In a Jupyter kernel the default (`progress=True`) is a
widget (`WidgetDisplay`: an ipywidgets bar and line, updated in place) when ipywidgets is
installed, else the rich bar; never a new line every few seconds. rich's and tqdm's own Jupyter
displays are not used (rich's Live misbehaves on ipykernel 7; `tqdm.auto` warns without
ipywidgets): the rich display is a `rich.progress.Progress` on a `Console` of its own, told
that it is not in Jupyter and drawn as one line redrawn with a carriage return (which a
notebook's output area and a terminal both understand); tqdm is `tqdm.std`, which draws the
same way.
Neither touches anything process-wide: no refresh thread (the display is refreshed on the
job's own turns), no redirect of `sys.stdout`/`sys.stderr`, no global console; both are
`transient` (gone when the call returns) and closed by the job's `finally`, after an error or
an interrupt too. rich is a dependency of evalpipe; tqdm is not, and `progress="tqdm"` without
it is a `ConfigError` before anything is sent.

`display_for` turns the user's `progress=` value into a `Display` (`evalpipe.engine.progress`),
checking it first: a value it does not know is one line naming `progress`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from typing import Any, TextIO

from evalpipe.engine import Display, EventLog, LogDisplay, ProgressSnapshot, progress_line
from evalpipe.errors import ConfigError

ProgressOption = bool | str | Callable[[ProgressSnapshot], Any] | None
PLAIN_SECONDS = 10.0  # between two plain lines (the CLI's default --progress-interval)
DRAW_SECONDS = 0.2  # between two redraws of a bar, and two calls of a callback
KINDS = ("plain", "rich", "tqdm")


def display_for(progress: ProgressOption, stream: TextIO | None = None) -> Display:
    """The display `progress=` asks for (see `evalpipe.api.score`), writing to `stream`
    (default: `sys.stderr` as it is when the job starts drawing).

    True: in a Jupyter kernel a widget (with ipywidgets) or else a rich bar redrawn in place;
    a rich bar when the stream is a terminal; plain lines elsewhere (a log);
    False or None: nothing at all; "plain", "rich", "tqdm": that one; a callable: called with a
    `ProgressSnapshot`. Anything else is a ConfigError, as is "tqdm" without tqdm installed."""
    if progress is None or progress is False:
        return Silent()
    if progress is True:
        if _in_a_kernel(_stream(stream)):
            return WidgetDisplay() if _has_widgets() else RichDisplay(stream)
        return RichDisplay(stream) if _stream(stream).isatty() else _plain(stream)
    if isinstance(progress, str):
        if progress == "plain":
            return _plain(stream)
        if progress == "rich":
            return RichDisplay(stream)
        if progress == "tqdm":
            if importlib.util.find_spec("tqdm") is None:
                raise ConfigError(
                    "progress: 'tqdm' needs the tqdm package, which is not installed: "
                    "`pip install tqdm`, or use progress='rich' or 'plain'"
                )
            return TqdmDisplay(stream)
    elif callable(progress):
        return CallbackDisplay(progress)
    raise ConfigError(
        f"progress: {progress!r} is not a progress display; give True, False, 'plain', "
        "'rich', 'tqdm' or a function taking an ep.ProgressSnapshot"
    )


def _stream(stream: TextIO | None) -> TextIO:
    return stream if stream is not None else sys.stderr  # late: notebooks and tests swap it


def _plain(stream: TextIO | None) -> LogDisplay:
    """The CLI's progress lines (never its bar), and a last one when the job ends."""
    return LogDisplay(EventLog(stream=stream), PLAIN_SECONDS, last_line=True, bar=False)


def _in_a_kernel(stream: TextIO) -> bool:
    """Whether `stream` is a Jupyter kernel's output (ipykernel's OutStream): not a terminal,
    yet it redraws a line ended by a carriage return."""
    return type(stream).__module__.startswith("ipykernel")


def _has_widgets() -> bool:
    return importlib.util.find_spec("ipywidgets") is not None


class Silent:
    """`progress=False`: nothing is drawn or printed."""

    interval = float("inf")

    def update(self, snapshot: ProgressSnapshot) -> None:
        return None

    def close(self, snapshot: ProgressSnapshot) -> None:
        return None


class CallbackDisplay:
    """`progress=function`: the function gets a `ProgressSnapshot` at most every
    DRAW_SECONDS while the job runs, and the last one (`final=True`) when it ends. What it
    raises ends the job as an error would (finished rows are kept)."""

    interval = DRAW_SECONDS

    def __init__(self, callback: Callable[[ProgressSnapshot], Any]) -> None:
        self._callback = callback

    def update(self, snapshot: ProgressSnapshot) -> None:
        self._callback(snapshot)

    def close(self, snapshot: ProgressSnapshot) -> None:
        self._callback(snapshot)


class RichDisplay:
    """`progress="rich"`: a one-line rich bar on a console of the call's own (see the module
    docstring), redrawn on the job's turns, cleared when the job ends."""

    interval = DRAW_SECONDS

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.bar: Any = None  # the rich Progress, once drawing (None again once closed)
        self._task: Any = None

    def _start(self, s: ProgressSnapshot) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        stream = _stream(self._stream)
        terminal = True if stream.isatty() or _in_a_kernel(stream) else None
        console = Console(file=stream, force_jupyter=False, force_terminal=terminal)
        self.bar = Progress(
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[line]}"),
            console=console,
            auto_refresh=False,  # no thread: redrawn by `update`
            transient=True,
            redirect_stdout=False,  # sys.stdout and sys.stderr stay the caller's
            redirect_stderr=False,
        )
        self._task = self.bar.add_task("rows", total=s.rows_total, completed=s.rows_done, line="")
        self.bar.start()

    def update(self, snapshot: ProgressSnapshot) -> None:
        if self.bar is None:
            self._start(snapshot)
        line_ = progress_line(snapshot, rows=False)
        self.bar.update(self._task, completed=snapshot.rows_done, line=line_, refresh=True)

    def close(self, snapshot: ProgressSnapshot) -> None:
        if self.bar is None:
            return
        bar, self.bar = self.bar, None
        try:
            bar.update(self._task, completed=snapshot.rows_done, refresh=True)
        finally:
            bar.stop()


class TqdmDisplay:
    """`progress="tqdm"`: a `tqdm.std` bar (never `tqdm.auto`, which wants ipywidgets in a
    notebook), cleared when the job ends (`leave=False`)."""

    interval = DRAW_SECONDS

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.bar: Any = None  # the tqdm bar, once drawing (None again once closed)

    def update(self, snapshot: ProgressSnapshot) -> None:
        if self.bar is None:
            from tqdm.std import tqdm

            self.bar = tqdm(
                total=snapshot.rows_total, initial=snapshot.rows_done, unit="row",
                file=_stream(self._stream), leave=False, mininterval=DRAW_SECONDS,
            )  # fmt: skip
        self.bar.set_postfix_str(progress_line(snapshot, rows=False), refresh=False)
        self.bar.update(snapshot.rows_done - self.bar.n)

    def close(self, snapshot: ProgressSnapshot) -> None:
        if self.bar is None:
            return
        bar, self.bar = self.bar, None
        bar.close()


class WidgetDisplay:
    """`progress=True` in a Jupyter kernel with ipywidgets: a bar and the progress line as
    widgets in the cell's output, updated in place, closed (gone) when the job ends."""

    interval = DRAW_SECONDS

    def __init__(self) -> None:
        self.box: Any = None  # the widgets' box, once drawing (None again once closed)
        self._bar: Any = None
        self._line: Any = None

    def _start(self, s: ProgressSnapshot) -> None:
        import ipywidgets
        from IPython.display import display

        self._bar = ipywidgets.IntProgress(min=0, max=max(1, s.rows_total), value=s.rows_done)
        self._line = ipywidgets.Label()
        self.box = ipywidgets.HBox([self._bar, self._line])
        display(self.box)  # type: ignore[no-untyped-call]

    def update(self, snapshot: ProgressSnapshot) -> None:
        if self.box is None:
            self._start(snapshot)
        self._bar.max = max(1, snapshot.rows_total)
        self._bar.value = snapshot.rows_done
        self._line.value = progress_line(snapshot)

    def close(self, snapshot: ProgressSnapshot) -> None:
        if self.box is None:
            return
        box, self.box = self.box, None
        box.close()
