"""The web view: a cassette's runs, their timelines, steps, diffs and experiments as pages,
served by `forkpoint ui` or inside `forkpoint serve` (`/_forkpoint/ui/`).

It sits above `forkpoint.api` and reads only through it (`api.Reader`), never writing:
`views` routes and answers, `pages` and `runs` say what each page shows (the same data its
`.json` form returns), `bodies` renders recorded bodies escaped, `timeline` lays out a run's
waterfall, `live` follows a run being recorded, `render` holds the Jinja2 templates (the `ui`
extra) and `server` is `forkpoint ui` itself.
"""
