from forkpoint.cli.main import main

__all__ = ["main"]
