"""Asset checks: engine.checks.CHECKS (declared once, also evaluated by `webdedup run`) as
Dagster asset checks."""

import dagster as dg

from ..engine.checks import CHECKS, Check, describe_failure
from .resources import WebdedupStorage

__all__ = ["ASSET_CHECKS", "describe_failure"]


def _metadata(details: dict) -> dict[str, dg.MetadataValue]:
    """The details as JSON, and each number in them (actual and expected counts) as its own entry."""
    numbers = {}
    for key, value in details.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            numbers[key] = dg.MetadataValue.int(value)
        elif isinstance(value, float):
            numbers[key] = dg.MetadataValue.float(value)
        elif isinstance(value, dict):  # e.g. {"expected": 18, "actual": 18}
            for inner, number in value.items():
                if isinstance(number, int) and not isinstance(number, bool):
                    numbers[f"{key}/{inner}"] = dg.MetadataValue.int(number)
                elif isinstance(number, float):
                    numbers[f"{key}/{inner}"] = dg.MetadataValue.float(number)
    return {"details": dg.MetadataValue.json(details), **numbers}


def asset_check(check: Check) -> dg.AssetChecksDefinition:
    """A blocking check fails the run and skips what follows; a warning reports WARN with its
    message; a pinned count check with nothing to compare (no expectations, months not built yet)
    passes and says why."""

    @dg.asset_check(
        asset=check.asset, name=check.name, description=check.description, blocking=check.kind == "blocking"
    )
    def _check(storage: WebdedupStorage) -> dg.AssetCheckResult:
        passed, details = check.evaluate(storage.store())
        if passed is None:  # nothing to compare with: not a failure (a real warning must stand out)
            return dg.AssetCheckResult(
                passed=True,
                description=f"not compared: {details['skipped']}",
                metadata={"skipped": dg.MetadataValue.text(details["skipped"])},
            )
        return dg.AssetCheckResult(
            passed=bool(passed),
            severity=dg.AssetCheckSeverity.WARN if check.kind == "warning" else dg.AssetCheckSeverity.ERROR,
            description=None if passed else describe_failure(details),
            metadata=_metadata(details),
        )

    return _check


ASSET_CHECKS = [asset_check(check) for check in CHECKS]
