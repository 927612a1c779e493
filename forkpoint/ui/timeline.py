"""A run's waterfall: each step a bar from when its request arrived for as long as it took,
its time to first byte marked, a stream's chunks as ticks where they arrived, the bar's colour
its origin (live, replayed, mocked, diverged), and the run's snapshots on the time axis.

Positions are percentages of the run's span, worked out here so the page needs no script to
draw it; the live page's script lays bars out again from the same `start`/`duration` in ms
as new steps widen the span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from forkpoint.compare.render import ms
from forkpoint.models import Exchange, Snapshot

# Chunk ticks drawn on one bar at most (evenly chosen): a stream of thousands of chunks is
# still one bar, not thousands of elements.
TICKS = 16
# The narrowest bar, % of the span, so an instant step is still seen.
NARROWEST = 0.2


@dataclass(frozen=True, slots=True)
class Bar:
    step: int
    start_ms: float  # since the run's first request
    duration_ms: float
    left: float  # % of the span
    width: float  # % of the span
    ttfb: float | None  # % of the bar
    ticks: tuple[float, ...]  # % of the bar
    origin: str
    complete: bool
    label: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A snapshot on the axis: taken when request `step` arrived."""

    step: int
    left: float
    adapters: str
    failed: bool


@dataclass(frozen=True, slots=True)
class Timeline:
    span_ms: float
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]
    axis: tuple[tuple[float, str], ...]  # (% of the span, label)


def timeline(exchanges: Sequence[Exchange], snapshots: Sequence[Snapshot] = ()) -> Timeline:
    """The waterfall of a run's `exchanges`, with its `snapshots` on the axis."""
    if not exchanges:
        return Timeline(0.0, (), (), ())
    first = min(e.started_at for e in exchanges) * 1000
    end = max(e.started_at * 1000 + (e.duration_ms or 0.0) for e in exchanges)
    span = max(end - first, 1.0)
    bars = tuple(_bar(e, first, span) for e in exchanges)
    starts = {bar.step: bar.left for bar in bars}
    by_step: dict[int, list[Snapshot]] = {}
    for snapshot in snapshots:
        by_step.setdefault(snapshot.step, []).append(snapshot)
    marks = tuple(
        Mark(step, starts[step], ", ".join(s.adapter for s in taken), not all(s.ok for s in taken))
        for step, taken in sorted(by_step.items())
        if step in starts
    )
    axis = tuple((fraction * 100, ms(span * fraction)) for fraction in (0, 0.25, 0.5, 0.75, 1))
    return Timeline(span, bars, marks, axis)


def _bar(exchange: Exchange, first: float, span: float) -> Bar:
    start = exchange.started_at * 1000 - first
    duration = exchange.duration_ms or 0.0
    ttfb = None
    if exchange.ttfb_ms is not None and duration > 0:
        ttfb = min(exchange.ttfb_ms / duration * 100, 100.0)
    ticks: tuple[float, ...] = ()
    if exchange.chunks and duration > 0:
        chunks = exchange.chunks
        every = max(1, len(chunks) // TICKS)
        ticks = tuple(min(c.offset_ms / duration * 100, 100.0) for c in chunks[::every])
    summary = exchange.summary
    model = summary.model if summary and summary.model else None
    return Bar(
        step=exchange.step,
        start_ms=start,
        duration_ms=duration,
        left=start / span * 100,
        width=max(duration / span * 100, NARROWEST),
        ttfb=ttfb,
        ticks=ticks,
        origin=str(exchange.origin),
        complete=exchange.complete,
        label=model or f"{exchange.method} {exchange.route}",
    )


def bar_html(bar: Bar) -> Markup:
    """A bar as its lane of the waterfall, built here rather than in a template: a run of a
    thousand steps has tens of thousands of ticks, and only the label and origin are text."""
    origin = escape(bar.origin)
    title = escape(f"step {bar.step}: {bar.label}, {bar.duration_ms:.0f} ms, {bar.origin}")
    marks = "".join(f'<i style="left:{tick:.1f}%"></i>' for tick in bar.ticks)  # chunks
    if bar.ttfb is not None:
        marks = f'<b style="left:{bar.ttfb:.1f}%" title="first byte"></b>' + marks
    return Markup(
        f'<li class="lane" data-step="{bar.step}" data-start="{bar.start_ms:.3f}" '
        f'data-duration="{bar.duration_ms:.3f}"><a href="#step-{bar.step}" class="lane-label">'
        f'{bar.step}</a><span class="track"><span class="bar o-{origin}'
        f'{"" if bar.complete else " cut"}" style="left:{bar.left:.3f}%;width:{bar.width:.3f}%"'
        f' title="{title}">{marks}</span></span></li>'
    )
