"""The ``pocketmq`` command line (typer + rich). ``main`` is the console-script entry point."""

from __future__ import annotations

from pocketmq.cli.app import app, main

__all__ = ["app", "main"]
