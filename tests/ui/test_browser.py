"""End-to-end tests of the ``rllm ui`` pages in headless Chromium, against the real app and a real store.

The store holds two tiny-model training runs (``rllm train`` in this process), a run written through the
store's ``RunWriter`` with a tool call, a drift point and graded eval items, and, for the live test, a
run whose metrics a thread appends while the page is open. Every page is screenshotted (see
``browser_support.Screenshots``). Skips without the ``playwright`` package or a Chromium executable, but
fails when ``$RLLM_TEST_EXTRAS`` names ``ui-tests``, as CI's ui browser tier (which installs both) does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import (
    SETUP_HINT,
    MetricWriter,
    Screenshots,
    find_chromium,
    serve_ui,
    tiny_training,
    train_tiny_runs,
    write_agent_run,
)
from ci_support import require_import, skip_or_fail

sync_api = require_import("playwright.sync_api", SETUP_HINT, extra="ui-tests")

CHROMIUM = find_chromium()
if CHROMIUM is None:
    skip_or_fail(f"no Chromium executable for the browser tests: {SETUP_HINT}", extra="ui-tests")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: Chromium refuses to start its sandbox as root (CI containers).
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two real tiny training runs plus the RunWriter-written agent run, in one store."""
    workdir = tmp_path_factory.mktemp("ui_store")
    path = train_tiny_runs(workdir, ("tiny-a", "tiny-b"))
    return {"path": path, "agent_run": write_agent_run(path)}


@pytest.fixture(scope="module")
def ui(store: dict[str, object]) -> Iterator[str]:
    with serve_ui(store["path"]) as url:  # type: ignore[arg-type]
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Screenshots:
    return Screenshots(tmp_path_factory.mktemp("ui_screenshots"))


@pytest.fixture
def page(browser: sync_api.Browser) -> Iterator[sync_api.Page]:
    """A fresh page (no saved preferences) that fails the test on any uncaught JavaScript error."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def run_id(store: dict[str, object], name: str) -> str:
    from rllm.store import StoreReader

    return next(r["id"] for r in StoreReader(store["path"]).runs() if r["name"] == name)  # type: ignore[arg-type]


def points_drawn(page: sync_api.Page) -> int:
    return int(page.get_by_test_id("chart-points").inner_text())


# ------------------------------------------------------------------------------------------ tests


def test_empty_store_shows_how_to_start_a_run(
    page: sync_api.Page, tmp_path: Path, shots: Screenshots
) -> None:
    with serve_ui(tmp_path / "no_runs_yet.db") as url:
        page.goto(url)
        panel = page.get_by_test_id("empty-state")
        sync_api.expect(panel).to_be_visible()
        sync_api.expect(panel).to_contain_text("rllm train")
        sync_api.expect(panel).to_contain_text("rllm eval larger")
        assert page.get_by_test_id("runs-table").count() == 0
        shots.save(page, "empty_state")


def test_runs_list_and_compare(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    page.goto(ui)
    table = page.get_by_test_id("runs-table")
    sync_api.expect(table).to_contain_text("reward/mean")  # a key-metric column
    for name in ("tiny-a", "tiny-b", "agent"):
        row = page.locator(f"[data-testid=run-row][data-run-id='{run_id(store, name)}']")
        sync_api.expect(row).to_contain_text(name)
        sync_api.expect(row.locator(".badge")).to_have_text("finished")
    shots.save(page, "runs_list")

    for name in ("tiny-a", "tiny-b"):
        page.locator(
            f"[data-testid=run-row][data-run-id='{run_id(store, name)}'] input[type=checkbox]"
        ).check()
    page.get_by_test_id("compare-button").click()
    sync_api.expect(page.get_by_test_id("chart").first).to_be_visible()
    assert "#/compare?runs=" in page.url
    # One line per run in every chart's legend, and points drawn.
    first_chart = page.get_by_test_id("chart").first
    sync_api.expect(first_chart.locator(".u-legend .u-series")).to_have_count(3)  # step + two runs
    assert points_drawn(page) > 0
    shots.save(page, "compare")

    page.locator("#theme-toggle").click()  # the dark theme redraws the charts in its colours
    sync_api.expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    sync_api.expect(page.get_by_test_id("chart").first).to_be_visible()
    shots.save(page, "compare_dark")


def test_live_run_chart_gains_points_without_reload(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    writer = MetricWriter(store["path"], "live", steps=40, initial=3, interval_s=0.3)  # type: ignore[arg-type]
    page.goto(f"{ui}/#/runs/{writer.writer.id}")
    sync_api.expect(page.get_by_test_id("chart-points")).to_have_text("3")
    sync_api.expect(page.locator(".run-head .badge")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")
    writer.start()
    try:
        page.wait_for_function(
            "Number(document.querySelector('[data-testid=chart-points]').textContent) >= 8"
        )
        shots.save(page, "live_run")
    finally:
        writer.stop.set()
        writer.join(timeout=10)
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded instead of appending points"
    # The stream ends with the run; the header then says it finished.
    sync_api.expect(page.locator(".run-head .badge")).to_have_text("finished", timeout=10_000)


def test_a_real_training_run_streams_into_its_chart(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    """The same as above with `rllm train` itself writing: open the run while it trains, watch points arrive."""
    from rllm.store import StoreReader

    path = Path(store["path"])  # type: ignore[arg-type]
    training = threading.Thread(
        target=tiny_training, args=(path.parent, path, "training-now"), kwargs={"steps": 40}, daemon=True
    )
    training.start()
    try:
        deadline = time.monotonic() + 60
        while not any(r["name"] == "training-now" and r["step"] for r in StoreReader(path).runs()):
            assert training.is_alive() and time.monotonic() < deadline, "the training run never logged a step"
            time.sleep(0.1)
        page.goto(f"{ui}/#/runs/{run_id(store, 'training-now')}")
        sync_api.expect(page.locator(".run-head .badge")).to_have_text("live")
        page.evaluate("window.__sameDocument = true")
        first = points_drawn(page)
        page.wait_for_function(
            f"Number(document.querySelector('[data-testid=chart-points]').textContent) >= {first + 3}",
            timeout=60_000,
        )
        shots.save(page, "real_training_live")
        assert page.evaluate("window.__sameDocument === true"), (
            "the page reloaded instead of appending points"
        )
    finally:
        training.join(timeout=180)
    sync_api.expect(page.locator(".run-head .badge")).to_have_text("finished", timeout=15_000)


def test_episode_browser_filters_and_opens_an_episode(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    page.goto(f"{ui}/#/runs/{run_id(store, 'tiny-a')}/episodes")
    rows = page.get_by_test_id("episode-row")
    sync_api.expect(rows.first).to_be_visible()
    total = rows.count()
    assert total > 0
    shots.save(page, "episodes")

    page.locator(".filters select").nth(0).select_option("1")  # step 1 only
    sync_api.expect(page.get_by_test_id("pager")).not_to_contain_text(f"of {total}")
    assert "step=1" in page.url
    assert set(rows.locator("td:first-child").all_inner_texts()) == {"1"}

    page.get_by_test_id("episode-search").fill("no response contains this")
    sync_api.expect(page.get_by_test_id("episodes-empty")).to_be_visible()

    page.goto(f"{ui}/#/runs/{run_id(store, 'tiny-a')}/episodes")
    page.get_by_test_id("episode-row").first.click()
    view = page.get_by_test_id("episode-view")
    sync_api.expect(view).to_contain_text("Which number is larger")  # the prompt message
    sync_api.expect(view.locator(".msg-response")).to_have_count(1)


def test_token_view_colours_every_token_with_values_in_a_tooltip(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    page.goto(f"{ui}/#/runs/{run_id(store, 'tiny-a')}/episodes")
    page.get_by_test_id("episode-row").first.click()
    page.get_by_test_id("tokens-button").first.click()
    view = page.get_by_test_id("token-view")
    tokens = view.get_by_test_id("token")
    sync_api.expect(tokens.first).to_be_visible()
    n = tokens.count()
    assert 0 < n <= 8  # rollout.max_tokens=8, and prompt tokens are hidden by default

    def backgrounds() -> list[str]:
        return tokens.evaluate_all("spans => spans.map(s => getComputedStyle(s).backgroundColor)")

    by_logprob = backgrounds()
    assert all(colour not in ("", "rgba(0, 0, 0, 0)", "transparent") for colour in by_logprob), by_logprob

    tokens.nth(2).hover()
    tooltip = page.get_by_test_id("token-tooltip")
    sync_api.expect(tooltip).to_be_visible()
    sync_api.expect(tooltip).to_contain_text("rollout logprob")
    sync_api.expect(tooltip).to_contain_text("trainer − rollout")  # the run recomputed trainer logprobs
    sync_api.expect(tooltip).to_contain_text("loss mask")
    shots.save(page, "token_view")

    select = view.get_by_test_id("token-colour")
    select.select_option("mask")
    assert all(colour == backgrounds()[0] for colour in backgrounds())  # every response token is trained on
    select.select_option("diff")
    assert backgrounds() != by_logprob

    view.locator("input[type=checkbox]").check()  # show the prompt tokens too
    assert tokens.count() > n


def test_tool_calls_and_drift_point(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    page.goto(f"{ui}/#/runs/{store['agent_run']}/episodes")
    page.get_by_test_id("episode-row").first.click()
    view = page.get_by_test_id("episode-view")
    sync_api.expect(view.locator(".tool-call")).to_contain_text("calculator")
    sync_api.expect(view.locator(".tool-call")).to_contain_text('"expression": "17 * 23"')
    sync_api.expect(view.locator(".msg-tool")).to_contain_text("391")

    page.locator("[data-tokens='0:1']").click()
    token_view = page.get_by_test_id("token-view")
    sync_api.expect(token_view.locator(".drift-note")).to_contain_text("response token 2")
    drift = token_view.locator(".token-text .tok-drift")
    sync_api.expect(drift).to_have_text(" is")
    assert "t=0&s=1" in page.url  # the open token view is in the link
    unmasked = token_view.locator(".tok-unmasked")
    sync_api.expect(unmasked).to_have_count(1)  # the first response token has loss mask 0
    drift.hover()
    sync_api.expect(page.get_by_test_id("token-tooltip")).to_contain_text("drift point")
    shots.save(page, "token_view_drift")

    page.reload()  # a shared link reopens the same token view
    sync_api.expect(page.get_by_test_id("token-view").locator(".tok-drift").first).to_be_visible()


def test_eval_results_config_and_charts_tabs(
    page: sync_api.Page, ui: str, store: dict[str, object], shots: Screenshots
) -> None:
    page.goto(f"{ui}/#/runs/{store['agent_run']}/evals")
    rows = page.get_by_test_id("eval-row")
    sync_api.expect(rows).to_have_count(6)
    rows.nth(1).click()
    sync_api.expect(page.locator(".drill:visible")).to_contain_text("The answer is 7.")
    sync_api.expect(page.locator(".drill:visible")).to_contain_text("expected")
    shots.save(page, "eval_results")

    tiny = run_id(store, "tiny-a")
    page.goto(f"{ui}/#/runs/{tiny}/evals")
    sync_api.expect(page.get_by_test_id("evals-table").locator("tbody tr")).to_have_count(
        2
    )  # before and after

    page.goto(f"{ui}/#/runs/{tiny}/config")
    table = page.get_by_test_id("config-table")
    sync_api.expect(table).to_contain_text("trainer.steps")
    sync_api.expect(table).to_contain_text("backend.old_logprobs")
    shots.save(page, "config")

    page.goto(f"{ui}/#/runs/{tiny}")
    charts = page.get_by_test_id("chart")
    sync_api.expect(charts.first).to_be_visible()
    assert charts.count() >= 4
    assert points_drawn(page) == 2  # reward/mean at steps 1 and 2

    first = charts.first  # drag across it to zoom, then reset
    box = first.locator(".u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.2, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
    page.mouse.up()
    sync_api.expect(first).to_have_attribute("data-zoomed", "true")
    first.get_by_role("button", name="reset zoom").click()
    sync_api.expect(first).to_have_attribute("data-zoomed", "false")

    page.get_by_test_id("smoothing").fill("0")  # raw values only
    sync_api.expect(first.locator(".u-legend")).to_contain_text("value")
    page.get_by_test_id("smoothing").fill("0.9")
    sync_api.expect(first.locator(".u-legend")).to_contain_text("smoothed")

    page.get_by_test_id("key-picker").locator("summary").click()
    page.locator("[data-testid=key-picker] input[data-key='train/lr']").check()
    sync_api.expect(page.locator("[data-testid=chart][data-metric='train/lr']")).to_be_visible()
    shots.save(page, "run_charts")


def test_chart_helpers(page: sync_api.Page, tmp_path: Path) -> None:
    """The smoothing formula and the point bookkeeping of the charts, run in the browser."""
    with serve_ui(tmp_path / "empty.db") as url:
        page.goto(url)
        result = page.evaluate("""async () => {
            const chart = await import("./js/chart.js");
            const points = [[1, 0.5], [2, 0.6]];
            const added = chart.appendPoints(points, [[2, 0.6], [3, 0.7], [3, 0.9], [5, 1.0]]);
            return {
                smoothed: chart.ema([1, 2, null, 3], 0.5),
                raw: chart.ema([1, 2], 0),
                added, points,
                aligned: chart.alignSeries([[[1, 10], [3, 30]], [[2, 20], [3, 31]]]),
            };
        }""")
    # s_t = w s_{t-1} + (1 - w) x_t, shown as s_t / (1 - w^n); a missing value stays missing.
    expected, state, n = [], 0.0, 0
    for x in (1, 2, None, 3):
        if x is None:
            expected.append(None)
            continue
        state, n = 0.5 * state + 0.5 * x, n + 1
        expected.append(state / (1 - 0.5**n))
    assert result["smoothed"][2] is None
    assert [result["smoothed"][i] for i in (0, 1, 3)] == pytest.approx([expected[i] for i in (0, 1, 3)])
    assert result["raw"] == [1, 2]
    assert result["added"] == 2 and result["points"] == [[1, 0.5], [2, 0.6], [3, 0.7], [5, 1.0]]
    assert result["aligned"] == [[1, 2, 3], [10, None, 30], [None, 20, 31]]
