"""The `webdedup` command line: main.py parses and dispatches, one module per command group.
Nothing here imports Dagster."""
