"""The two ways a command ends early: one line on stderr naming what went wrong, then an exit status.
Raised by the command line's checks and by the application setup (exporter/app.py) alike."""

from __future__ import annotations


class UsageError(Exception):
    """A bad flag or variable: one line on stderr, exit status 2."""


class CommandError(Exception):
    """The command could not do its work (a taken port, nothing recorded): one line, exit status 1."""
