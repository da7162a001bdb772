"""The click path in a real browser (headless Debian Chromium driven by Playwright) over a real
`dagster dev` on 127.0.0.1: the asset catalog, a backfill of the three daily assets launched with
the mouse, the global stages following on their own, the asset checks green on the healthy fixture
corpus, a chart's numbers inline and the chart a click away, and the launchpad opening at the
parameters in force after a run at threshold 0.9 and a reload of the definitions.

Prints the seconds from the click on "Launch backfill" to the manifest's materialization."""

import shutil
import time

import pytest

from .test_ui import DAILY, GLOBAL, ui  # noqa: F401  (the dagster dev fixture, one per module)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium; .ci/run installs it)"
    ),
]

# The checks of each asset of the chain (engine/invariants.CHECKS): on the fixture all pass.
CHECKED = {
    "documents": {"doc_id_unique", "documents_match_expected_counts"},
    "candidate_pairs": {"candidates_well_formed", "candidate_pairs_match_expected_counts"},
    "duplicate_pairs": {"duplicates_meet_threshold", "duplicate_pairs_match_expected_counts"},
    "clusters": {"every_document_in_one_cluster", "clusters_match_expected_counts"},
    "deduped_documents": {
        "one_representative_per_cluster",
        "clusters_cohesive",
        "deduped_documents_match_expected_counts",
    },
}
GREEN = "--color-accent-green"


@pytest.fixture(scope="module")
def browser(ui):  # noqa: F811
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _new_page(browser):
    """A page in a new browser context: nothing kept from an earlier visit (the launchpad keeps
    the config a user typed in the browser's local storage)."""
    tab = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    tab.set_default_timeout(120_000)  # generous: CI machines are busy
    return tab


@pytest.fixture(scope="module")
def page(browser):
    return _new_page(browser)


def _open(page, ui, path: str) -> None:  # noqa: F811
    page.goto(f"http://127.0.0.1:{ui.port}{path}")


def _dismiss_welcome(page) -> None:
    """A fresh Dagster instance greets the first visit with a newsletter dialog: skip it."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=5_000)
    except Exception:  # playwright's TimeoutError: no dialog this time
        return
    skip.click()


def _launchpad_yaml(page, ui, job: str) -> str:  # noqa: F811
    """The config the launchpad of the job opens with."""
    _open(page, ui, f"/locations/webdedup/jobs/{job}/playground")
    editor = page.locator(".CodeMirror").first
    editor.wait_for()
    ui.wait(lambda: "threshold:" in editor.evaluate("e => e.CodeMirror.getValue()"), 120, "the launchpad's config")
    return editor.evaluate("e => e.CodeMirror.getValue()")


ROWS_JS = """() => Array.from(document.querySelectorAll('[class*=checkRow]')).map(row => {
    const icon = row.querySelector('[role=img]');
    const name = row.querySelector('[title]');
    return [name ? name.getAttribute('title') : '', icon ? icon.getAttribute('style') || '' : ''];
})"""


def _check_icons(page, ui, asset: str) -> list[tuple[str, str]]:  # noqa: F811
    """(check name, the style of its status icon) of each check in the asset's Checks tab, once
    the tab lists as many checks as the asset has, each with a status."""
    _open(page, ui, f"/assets/{asset}?view=checks")

    def listed():
        rows = page.evaluate(ROWS_JS)
        return {name for name, _ in rows} == CHECKED[asset] and all(style for _, style in rows) and rows

    return ui.wait(listed, 120, f"the checks of {asset}")


def test_the_click_path_from_the_catalog_to_the_launchpad(ui, browser, page):  # noqa: F811
    months = ui.wait(lambda: ui.partition_keys("documents") or None, 120, "the crawl-month partitions")
    assert months == ["2026-01", "2026-02", "2026-03"]

    # Catalog: the daily assets, ticked, then "Materialize selected" -> all partitions -> backfill
    _open(page, ui, "/assets")
    page.get_by_test_id("checkbox-documents").wait_for(state="attached")
    _dismiss_welcome(page)
    for asset in DAILY:
        page.locator("label", has=page.get_by_test_id(f"checkbox-{asset}")).click()
    page.get_by_role("button", name="Materialize selected").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="All", exact=True).click()
    dialog.get_by_text(f"{len(months)} partitions").wait_for()
    clicked = time.time()
    dialog.get_by_role("button", name="Launch backfill").click()
    page.get_by_text("Created backfill").wait_for()

    # the global stages follow on their own: one global run after the backfill's one daily run
    def manifest_materialized():
        runs = ui.runs()
        done = [r for r in runs if r["jobName"] == "webdedup_global" and r["status"] in ("SUCCESS", "FAILURE")]
        return runs if done else None

    runs = ui.wait(manifest_materialized, 600, "the global run after the backfill")
    assert [r["status"] for r in runs if r["jobName"] == "webdedup_global"] == ["SUCCESS"]
    assert [r["status"] for r in runs if r["jobName"] == "__ASSET_JOB"] == ["SUCCESS"]
    print(f"\nbrowser click-to-manifest: {ui.materialized_at('manifest') - clicked:.1f} s")

    # the catalog shows every global asset materialized
    _open(page, ui, "/assets")
    page.get_by_test_id("checkbox-manifest").wait_for(state="attached")
    for asset in GLOBAL:
        # the innermost element of the table that holds the asset's checkbox: its row
        row = page.locator("[class*=VirtualizedTable_row]", has=page.get_by_test_id(f"checkbox-{asset}")).last
        ui.wait(lambda row=row: "Never materialized" not in row.inner_text(), 120, f"{asset} materialized in the UI")

    # the checks: every one green (passed) on the healthy fixture corpus
    for asset in CHECKED:
        icons = _check_icons(page, ui, asset)
        assert all(GREEN in style for _, style in icons), (asset, icons)

    # a chart's numbers inline, the chart itself one click away
    _open(page, ui, "/assets/scored_pairs?view=events")
    numbers = page.locator("tr", has=page.get_by_text("jaccard_counts", exact=True)).first
    # the row's name is drawn before its value: wait for the value, then read it
    text = ui.wait(lambda: "candidates" in numbers.inner_text() and numbers.inner_text(), 60, "jaccard_counts' value")
    assert "0.9500" in text
    chart = page.locator("tr", has=page.get_by_text("jaccard_histogram", exact=True)).first
    chart.get_by_text("[Show Markdown]").click()
    image = page.get_by_role("dialog").locator("img")
    image.wait_for()
    assert image.evaluate("i => i.complete && i.naturalWidth") > 100

    # the launchpad opens at the parameters in force: the code default before, 0.9 after a run at
    # threshold 0.9 (launched from the launchpad) and a reload of the definitions
    assert "threshold: 0.7" in _launchpad_yaml(page, ui, "webdedup_global")
    editor = page.locator(".CodeMirror").first
    yaml = editor.evaluate("e => e.CodeMirror.getValue()")
    editor.evaluate("(e, v) => e.CodeMirror.setValue(v)", yaml.replace("threshold: 0.7", "threshold: 0.9"))
    page.get_by_role("button", name="Launch Run").click()

    def second_global_run():
        runs = [r for r in ui.runs() if r["jobName"] == "webdedup_global"]
        return len(runs) == 2 and runs[0]["status"] in ("SUCCESS", "FAILURE") and runs[0]

    assert ui.wait(second_global_run, 300, "the global run at threshold 0.9")["status"] == "SUCCESS"
    fresh = _new_page(browser)  # (this page's launchpad would show what was typed into it)
    assert "threshold: 0.7" in _launchpad_yaml(fresh, ui, "webdedup_global")  # read when the code loaded
    _open(page, ui, "/assets")
    page.get_by_role("button", name="Reload definitions").click()
    yaml = ui.wait(
        lambda: (
            (text := _launchpad_yaml(_new_page(browser), ui, "webdedup_global")) and "threshold: 0.9" in text and text
        ),
        180,
        "the launchpad at threshold 0.9 after the reload",
    )
    assert "threshold: 0.7" not in yaml, yaml
