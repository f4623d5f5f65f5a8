"""A4 page layout for the PDF exports: titles, wrapped tables, charts placed on pages, footers with page numbers.

Owns where things go on a page (in figure fractions of an A4 ``Figure``, 595 x 842 pt) and when a page is full.
``PageBook`` flows blocks top to bottom and starts a new page when the next block does not fit, so that no page is
a strip and no statement is a page of its own. It knows nothing about sessions: the report and the comparison
decide what to put in. Must never import Qt.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from ringscope.gui.core.phases import PHASES

PAGE_PT: tuple[int, int] = (595, 842)
"""A4 portrait in PostScript points (what every page of every PDF export measures)."""
PAGE_SIZE: tuple[float, float] = (PAGE_PT[0] / 72, PAGE_PT[1] / 72)
LEFT, RIGHT, TOP, BOTTOM = 0.07, 0.95, 0.955, 0.065
_PT_Y = 1.0 / PAGE_PT[1]
_CHAR_WIDTH_EM = 0.56  # DejaVu Sans' mean advance for report text: wraps a little early rather than overflow


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: header, width as a fraction of the page width, alignment."""

    header: str
    width: float
    align: str = "left"
    bold: bool = False


class PageBook:
    """Pages being laid out; ``finish`` adds the footers (label and "page i of n") and returns the figures."""

    def __init__(self, document: str) -> None:
        self.document = document
        self.pages: list[tuple[Figure, str]] = []
        self.y = TOP
        self._footer = ""

    # ---- Pages ----

    def new_page(self, footer: str | None = None) -> Figure:
        """Start a page; ``footer`` (e.g. the run id) is kept for the following pages until changed."""
        if footer is not None:
            self._footer = footer
        fig = Figure(figsize=PAGE_SIZE)
        self.pages.append((fig, self._footer))
        self.y = TOP
        return fig

    @property
    def fig(self) -> Figure:
        """The page being filled."""
        return self.pages[-1][0] if self.pages else self.new_page()

    def room(self) -> float:
        """What is left of the page, as a fraction of its height."""
        return self.y - BOTTOM

    def need(self, height: float) -> None:
        """Start a new page unless ``height`` still fits on this one."""
        if not self.pages or self.y - height < BOTTOM:
            self.new_page()

    def finish(self) -> list[Figure]:
        """Add each page's footer and return the pages."""
        total = len(self.pages)
        for number, (fig, footer) in enumerate(self.pages, start=1):
            fig.add_artist(Line2D([LEFT, RIGHT], [0.045, 0.045], transform=fig.transFigure, color="#ccc", lw=0.6))
            fig.text(LEFT, 0.03, f"{self.document} · {footer}" if footer else self.document, fontsize=7,
                     color="#555", va="center")
            fig.text(RIGHT, 0.03, f"page {number} of {total}", fontsize=7, color="#555", va="center", ha="right")
        return [fig for fig, _ in self.pages]

    # ---- Text ----

    def title(self, text: str, subtitle: str = "") -> None:
        """The page's title and a grey line under it."""
        self.need(0.06)
        self.fig.text(LEFT, self.y, text, fontsize=15, weight="bold", va="top")
        self.y -= 24 * _PT_Y
        if subtitle:
            for line in textwrap.wrap(subtitle, _chars(RIGHT - LEFT, 9)):
                self.fig.text(LEFT, self.y, line, fontsize=9, color="#444", va="top")
                self.y -= 12 * _PT_Y
        self.y -= 6 * _PT_Y

    def heading(self, text: str, keep_with: float = 0.05) -> None:
        """A section heading, kept on the same page as the first ``keep_with`` of what follows."""
        self.need(18 * _PT_Y + keep_with)
        self.y -= 4 * _PT_Y
        self.fig.text(LEFT, self.y, text, fontsize=11, weight="bold", va="top")
        self.y -= 17 * _PT_Y

    def paragraph(self, text: str, size: float = 8.5, *, weight: str = "normal", color: str = "#222",
                  box: str | None = None) -> None:
        """Wrapped text; ``box`` is a background color (the verdict)."""
        lines = textwrap.wrap(text, _chars(RIGHT - LEFT - 0.02, size)) or [""]
        line_h = size * 1.4 * _PT_Y
        height = len(lines) * line_h + (10 * _PT_Y if box else 0)
        self.need(height)
        top = self.y
        if box:
            self.fig.add_artist(Rectangle((LEFT, top - height), RIGHT - LEFT, height, transform=self.fig.transFigure,
                                          facecolor=box, edgecolor="none"))
            self.y -= 5 * _PT_Y
        x = LEFT + (0.01 if box else 0)
        for line in lines:
            self.fig.text(x, self.y, line, fontsize=size, weight=weight, color=color, va="top")
            self.y -= line_h
        self.y = top - height - 6 * _PT_Y

    def phase_legend(self) -> None:
        """The phase colors, said once for the charts that follow."""
        self.need(16 * _PT_Y)
        x = LEFT
        for phase in PHASES:
            self.fig.add_artist(Rectangle((x, self.y - 8 * _PT_Y), 0.014, 8 * _PT_Y, transform=self.fig.transFigure,
                                          facecolor=phase.color, edgecolor="none"))
            self.fig.text(x + 0.018, self.y - 4 * _PT_Y, phase.label, fontsize=7.5, va="center")
            x += 0.018 + len(phase.label) * 7.5 * 0.5 / PAGE_PT[0] + 0.03
        self.y -= 16 * _PT_Y

    # ---- Tables ----

    def table(self, rows: Sequence[Sequence[str]], columns: Sequence[Column] | None = None, size: float = 8.0,
              header: bool = False) -> None:
        """Rows of cells, each cell wrapped to its column (nothing is cut); a row never splits across pages."""
        columns = list(columns or (Column("", 0.25, bold=True), Column("", RIGHT - LEFT - 0.25)))
        line_h = size * 1.38 * _PT_Y
        if header:
            self._row([c.header for c in columns], columns, size, line_h, header=True)
        for row in rows:
            before = len(self.pages)
            self._row(row, columns, size, line_h)
            if header and len(self.pages) != before:  # the row moved to a new page: repeat the header above it
                self.pages.pop()
                self.new_page()
                self._row([c.header for c in columns], columns, size, line_h, header=True)
                self._row(row, columns, size, line_h)

    def _row(self, cells: Sequence[str], columns: Sequence[Column], size: float, line_h: float,
             header: bool = False) -> None:
        wrapped = [textwrap.wrap(str(cell), _chars(col.width - 0.012, size)) or [""]
                   for cell, col in zip(cells, columns, strict=True)]
        height = max(len(lines) for lines in wrapped) * line_h + 5 * _PT_Y
        self.need(height)
        x = LEFT
        for lines, col in zip(wrapped, columns, strict=True):
            anchor = x + col.width - 0.012 if col.align == "right" else x
            for number, line in enumerate(lines):
                self.fig.text(anchor, self.y - 2.5 * _PT_Y - number * line_h, line, fontsize=size, va="top",
                              ha=col.align, weight="bold" if (header or col.bold) else "normal",
                              color="#444" if col.bold and not header else "#111")
            x += col.width
        self.y -= height
        self.fig.add_artist(Line2D([LEFT, RIGHT], [self.y, self.y], transform=self.fig.transFigure,
                                   color="#888" if header else "#e3e3e3", lw=0.8 if header else 0.5))

    # ---- Charts ----

    def chart(self, height: float, draw: Callable[[Axes], None], *, left: float = 0.11, right: float = RIGHT) -> Axes:
        """One chart across the page, ``height`` (page fraction) including its title and axis labels; ``right``
        short of the page's margin leaves room for a side legend."""
        self.need(height)
        ax = self.fig.add_axes((left, self.y - height + 34 * _PT_Y, right - left, height - 54 * _PT_Y))
        draw(ax)
        self.y -= height
        return ax

    def chart_pair(self, height: float, draw_a: Callable[[Axes], None], draw_b: Callable[[Axes], None], *,
                   left: float = 0.1, sharey: bool = True, gap: float = 0.07) -> tuple[Axes, Axes]:
        """Two charts side by side (A left, B right); with ``sharey`` on one x- and y-scale."""
        self.need(height)
        width = (RIGHT - left - gap) / 2
        bottom, tall = self.y - height + 34 * _PT_Y, height - 54 * _PT_Y
        ax_a = self.fig.add_axes((left, bottom, width, tall))
        ax_b = self.fig.add_axes((left + width + gap, bottom, width, tall), sharey=ax_a if sharey else None,
                                 sharex=ax_a if sharey else None)
        draw_a(ax_a)
        draw_b(ax_b)
        self.y -= height
        return ax_a, ax_b


def _chars(width_fraction: float, size: float) -> int:
    """How many characters of text at ``size`` pt fit in ``width_fraction`` of the page width."""
    return max(8, int(width_fraction * PAGE_PT[0] / (size * _CHAR_WIDTH_EM)))
