"""`python -m webdedup_assets.cli`: the `webdedup` command."""

from .main import entry

entry()
