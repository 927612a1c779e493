"""The web view's templates: Jinja2, shipped in the package, escaping everything by default.

A value from a cassette (a name, a label, a header, a body) reaches a page only through
autoescaping or through `forkpoint.ui.bodies`, which escapes as it builds markup; no template
marks cassette text safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import jinja2  # the `ui` extra, checked by the web view's way in (forkpoint.ui.server)
import orjson

from forkpoint.compare.cost import run_totals
from forkpoint.engine.redaction import REDACTED
from forkpoint.models import Exchange, Run
from forkpoint.ui.pages import step_row, totals_text
from forkpoint.ui.timeline import bar_html, timeline


class Templates:
    """The package's templates; `location` (where the cassette is) is on every page."""

    def __init__(self, *, location: str) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("forkpoint.ui", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["segment"] = lambda text: quote(str(text), safe="")
        self.env.globals["location"] = location
        self.env.globals["redacted"] = REDACTED
        self.env.globals["bar_html"] = bar_html
        self._macros = self.env.get_template("macros.html").module

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)

    def live_steps(self, run: Run, exchanges: Sequence[Exchange], fresh: Sequence[Exchange]) -> str:
        """The `steps` event of a live page: each new step's row and bar (links relative to the
        run's page), the timeline's new span, and the run's totals."""
        bars = {bar.step: bar for bar in timeline(exchanges).bars}
        root = "../"
        steps = [
            {
                "step": e.step,
                "row": str(self._macros.step(step_row(e), run.id, root)),  # type: ignore[attr-defined]
                "bar": str(bar_html(bars[e.step])),
            }
            for e in fresh
        ]
        totals = totals_text(run_totals(exchanges), len(exchanges))
        return orjson.dumps({"steps": steps, "totals": totals}).decode()
