"""Turning recorded runs into evidence: what each run cost, and how two runs differ.

`cost` prices exchanges and totals runs; `diff` aligns two runs step by step; `render` and
`html` show a diff in the terminal, as JSON and as a page; `cli` is the `forkpoint diff` command.
"""
