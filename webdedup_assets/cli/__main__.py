"""`python -m webdedup_assets.cli`: the `webdedup` command."""

from . import entry

entry()
