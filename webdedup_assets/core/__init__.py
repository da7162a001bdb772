"""Pure algorithms: no Dagster, no files."""
