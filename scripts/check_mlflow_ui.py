"""Look at a repository's MLflow runs the way a reader does: in the MLflow UI, in headless Chromium.

    python scripts/check_mlflow_ui.py [--repo PATH] [--run NAME] [--paper PAPER] [--shots DIR]

Copies `<repo>/mlflow.db` to a temporary folder (the repository's database is never opened for writing; the
artifacts are read where the runs logged them), starts `mlflow server` on 127.0.0.1 at a free port against the
copy, and checks five pages:

1. the runs table at the README's link (`tracking.runs_view_url`): the machine-learning workflow, not the GenAI
   overview, with the run and the metric columns best_val_CIDEr and test_CIDEr;
2. the run's page (by default the newest finished run with a best epoch): best_epoch and best_val_CIDEr, with
   the values MLflow stores;
3. the run's artifacts at its first qualitative picture: the PNG shown as an image;
4. the run's charts ("Model metrics"): the same picture as MLflow's image `example_<image id>`;
5. the runs table filtered by paper (`reports.runs.paper_view_url`: the search `tags.paper = '<paper>'`, the tag the
   index stage sets, reports/runs.py): the filter in the search box, the paper's runs (the newest MAX_LISTED by
   name) and no run of another name. The paper is --paper, else the run's `paper` tag, else that of the newest run
   with one; no run with a `paper` tag is a failed check.

Writes a screenshot of each page to --shots (runs_table.png, run_overview.png, run_artifact.png, run_charts.png,
runs_by_paper.png)
and exits 0 when every check holds, 1 otherwise (the failed checks on stderr). Needs Chromium
(`apt-get install chromium`; `--chromium PATH`) and the playwright package (its browser downloads are not needed).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossmodal.reports.runs import paper_filter, paper_view_url  # noqa: E402
from crossmodal.tracking import EXPERIMENT, runs_view_url  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PAGE_WAIT_MS = 30_000
MAX_LISTED = 40  # the filtered table's newest runs whose names are looked for (the page is made tall enough)
ROW_PX = 40  # at least the height of a row of the runs table


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def mlflow_server(db: Path, timeout: float = 120.0):
    """`mlflow server` on 127.0.0.1 against the database `db`; yields its base URL, stops it afterwards."""
    port = free_port()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    log = open(db.parent / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"], cwd=db.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start; its log:\n{(db.parent / 'server.log').read_text()}")
            time.sleep(1)
        yield base
    finally:
        os.killpg(server.pid, 15)  # the server and its worker processes
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
        log.close()


def pick_run(db: Path, name: str | None):
    """The experiment's id and the run to look at: `name`, else the newest finished run with a best epoch."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        raise SystemExit(f"error: {db} has no experiment {EXPERIMENT!r}; run the pipeline first")
    query = "attributes.status = 'FINISHED' and metrics.best_epoch >= 0"
    if name:
        query += f" and attributes.run_name = '{name}'"
    runs = client.search_runs([experiment.experiment_id], query, order_by=["attributes.start_time DESC"],
                              max_results=1)
    if not runs:
        raise SystemExit(f"error: no finished run {'named ' + repr(name) + ' ' if name else ''}with a best epoch")
    pictures = [a.path for a in client.list_artifacts(runs[0].info.run_id, "qualitative") if a.path.endswith(".png")]
    return experiment.experiment_id, runs[0], sorted(pictures)


def paper_runs(db: Path, experiment_id: str, run, paper: str | None):
    """The paper to filter by (`paper`, else the run's tag, else the newest tagged run's), the names of its newest
    MAX_LISTED runs and the names of the experiment's runs that the filter leaves out (none of them may show)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    if paper is None:
        paper = run.data.tags.get("paper")
    if paper is None:
        tagged = client.search_runs([experiment_id], "tags.paper != ''", order_by=["attributes.start_time DESC"],
                                    max_results=1)
        if not tagged:
            return None, [], []
        paper = tagged[0].data.tags["paper"]

    def names(query: str, limit: int = 50_000) -> list[str]:
        runs = client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"], max_results=limit)
        return list(dict.fromkeys(r.info.run_name for r in runs))

    return paper, names(paper_filter(paper), MAX_LISTED), sorted(set(names("")) - set(names(paper_filter(paper))))


def as_the_ui_prints(value: float) -> str:
    """A metric value as the UI prints it: JavaScript's shortest round-trip form, which Python's repr shares, but
    with no `.0` on whole numbers."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def loaded_image(page, selector: str) -> int:
    """The natural width of the first image matching `selector` once it has loaded (0: broken)."""
    image = page.locator(selector).first
    image.wait_for(timeout=PAGE_WAIT_MS)
    page.wait_for_function("img => img.complete", arg=image.element_handle(), timeout=PAGE_WAIT_MS)
    return image.evaluate("img => img.naturalWidth")


def check(repo: Path, shots: Path, run_name: str | None, chromium: str, paper: str | None = None) -> list[str]:
    """Every failed check, as one line each (none: the UI shows what it should)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    failures: list[str] = []

    def expect(condition: bool, what: str) -> None:
        print(("ok    " if condition else "FAIL  ") + what)
        if not condition:
            failures.append(what)

    shots.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlflow-ui-") as tmp:
        db = Path(tmp) / "mlflow.db"
        shutil.copy(repo / "mlflow.db", db)
        experiment_id, run, pictures = pick_run(db, run_name)
        run_id, name, metrics = run.info.run_id, run.info.run_name, run.data.metrics
        run_page = f"/#/experiments/{experiment_id}/runs/{run_id}"
        print(f"experiment {EXPERIMENT} (id {experiment_id}), run {name} ({run_id})")
        paper, listed, left_out = paper_runs(db, experiment_id, run, paper)
        with mlflow_server(db) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()  # a first visit

            def visit(shot: str, url: str, look) -> None:
                """Open `url`, run the page's checks `look()`, save the screenshot (also when a wait timed out)."""
                print(f"{shot}: {url}")
                page.goto(url)
                try:
                    look()
                except PlaywrightError as error:
                    expect(False, f"{shot}: {str(error).splitlines()[0]}")
                page.screenshot(path=str(shots / f"{shot}.png"))

            def runs_table() -> None:
                page.get_by_text(name, exact=True).first.wait_for(timeout=PAGE_WAIT_MS)
                page.get_by_text("best_val_CIDEr", exact=True).first.wait_for(timeout=PAGE_WAIT_MS)
                text = page.inner_text("body")
                expect("Overview" not in text.split(name)[0], "runs table: the runs view, not the GenAI overview")
                for column in ("best_val_CIDEr", "best_epoch", "test_CIDEr"):
                    expect(column in text, f"runs table: a {column} column")

            def run_overview() -> None:
                page.get_by_text("best_epoch", exact=True).first.wait_for(timeout=PAGE_WAIT_MS)
                text = page.inner_text("body").replace("\t", "\n")
                for metric in ("best_epoch", "best_val_CIDEr", "test_CIDEr"):
                    value = metrics.get(metric)
                    shown = value is not None and f"{metric}\n{as_the_ui_prints(value)}" in text
                    expect(shown, f"run page: {metric} = {value}")

            def run_artifact() -> None:  # the UI shows a fetched artifact as a blob: URL
                width = loaded_image(page, "img[src^='blob:']")
                expect(width > 0, f"run artifacts: {pictures[0]} shown as an image ({width} px wide)")

            def run_charts() -> None:  # MLflow's image `key` (tracking.Run.log_image), found with the charts' search
                page.get_by_placeholder("Search metric charts").fill(key)
                width = loaded_image(page, f"img[src*='{key}']")
                expect(width > 0, f"run charts: the image {key} ({width} px wide)")

            def runs_by_paper() -> None:  # the search the UI runs for `tags.paper = '<paper>'`, given in the URL
                page.get_by_text(listed[0], exact=True).first.wait_for(timeout=PAGE_WAIT_MS)
                with contextlib.suppress(PlaywrightError):  # let every page of the first search arrive
                    page.wait_for_load_state("networkidle", timeout=10_000)
                values = page.locator("input").evaluate_all("inputs => inputs.map(i => i.value)")
                expect(paper_filter(paper) in values, f"runs by paper {paper}: the search box holds "
                                                      f"{paper_filter(paper)}")
                missing = [n for n in listed if page.get_by_text(n, exact=True).count() == 0]
                expect(not missing, f"runs by paper {paper}: its {len(listed)} newest runs by name listed"
                                    + (f" (missing: {', '.join(missing)})" if missing else ""))
                shown = [n for n in left_out if page.get_by_text(n, exact=True).count() > 0]
                expect(not shown, f"runs by paper {paper}: none of the {len(left_out)} other run names listed"
                                  + (f" (listed: {', '.join(shown)})" if shown else ""))

            visit("runs_table", runs_view_url(experiment_id, base), runs_table)
            visit("run_overview", f"{base}{run_page}?workflowType=machine_learning", run_overview)
            expect(bool(pictures), "run artifacts: qualitative/*.png logged")
            if pictures:
                key = f"example_{Path(pictures[0]).stem}"
                visit("run_artifact", f"{base}{run_page}/artifacts/{pictures[0]}?workflowType=machine_learning",
                      run_artifact)
                visit("run_charts", f"{base}{run_page}/model-metrics?workflowType=machine_learning", run_charts)
            expect(paper is not None, "runs by paper: a run with a `paper` tag (the index stage sets it: "
                                      "python -m crossmodal.reports.runs)")
            if paper is not None:
                expect(bool(listed), f"runs by paper {paper}: a run with {paper_filter(paper)}")
            if listed:
                page.set_viewport_size({"width": 1600, "height": max(1000, 400 + ROW_PX * len(listed))})
                visit("runs_by_paper", paper_view_url(experiment_id, paper, base), runs_by_paper)
            browser.close()
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="repository whose mlflow.db to look at")
    parser.add_argument("--run", help="run name (default: the newest finished run with a best epoch)")
    parser.add_argument("--paper", help="paper whose runs the filtered table shows (default: the run's `paper` tag)")
    parser.add_argument("--shots", type=Path, default=Path("mlflow_ui_shots"), help="folder for the screenshots")
    parser.add_argument("--chromium", default=CHROMIUM, help="Chromium executable")
    args = parser.parse_args()
    if not (args.repo / "mlflow.db").is_file():
        print(f"error: {args.repo / 'mlflow.db'} not found", file=sys.stderr)
        return 2
    failures = check(args.repo.resolve(), args.shots, args.run, args.chromium, args.paper)
    for failure in failures:
        print(f"check_mlflow_ui: {failure}", file=sys.stderr)
    print(f"screenshots in {args.shots}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
