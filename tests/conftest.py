"""Fixtures shared by the test modules (a module opts in with `pytestmark = pytest.mark.usefixtures(...)`, or takes
the tiny pipeline's `tiny_build` or `tiny_repo` as an argument)."""
import os
import shutil
from pathlib import Path

import pytest
import torch

# The modules' order, which pytest-xdist (`--dist loadfile --no-loadscope-reorder`, pyproject.toml) follows in handing
# them to its workers: the tiny pipeline's build (end_to_end/test_tiny_pipeline.py) on one worker; meanwhile, on the
# other, modules that need no tiny pipeline (the build keeps about 1.6 of the 2 cores busy, and that worker would
# otherwise wait for it); then the modules that rerun the built stages, the longest first; then the other long ones
# (processes of their own), which the folders' order would leave near the end; then the rest, short ones filling both
# workers at the end (by default xdist sorts by number of tests, which put a one-test module of 140 s last, on one
# worker while the other waited). Paths relative to tests/.
FIRST_MODULES = ("end_to_end/test_tiny_pipeline.py",
                 "test_pipelines.py", "reports/test_figures.py", "test_environment.py", "test_tracking.py",
                 "docs/test_readme_examples.py",
                 "end_to_end/test_reruns.py", "end_to_end/test_queue.py", "end_to_end/test_real_profile.py",
                 "end_to_end/test_machine_cache.py", "training/test_distributed.py", "pipeline/test_repro.py")
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items):
    """FIRST_MODULES in their order, before the others, which keep theirs."""
    rank = {name: k for k, name in enumerate(FIRST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(TESTS).as_posix(), len(rank)))


@pytest.fixture
def one_thread():
    """One torch thread: tiny tensors gain little from a second one and lose much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64(one_thread):
    """float64 by default (exact comparisons against loops), on one thread."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory, worker_id):
    """The tests' tiny pipeline (tiny_pipeline.py), built once per session and never changed."""
    from tiny_pipeline import shared_build

    return shared_build(tmp_path_factory, worker_id)


@pytest.fixture(scope="module")
def tiny_repo(tiny_build, tmp_path_factory):
    """A module's own copy of the tiny pipeline, to rerun stages in, with a stage server for its stages."""
    from tiny_pipeline import copy_build, serve_stages

    repo = copy_build(tiny_build, tmp_path_factory.mktemp("pipeline") / "repo")
    with serve_stages(repo):
        yield repo


@pytest.fixture(scope="session", autouse=True)
def shared_meteor():
    """One METEOR JVM per pytest worker, for its tests and the stage processes they start, as `python -m
    crossmodal.pipeline.repro` gives its stages (metrics/meteor_server.py): each start loads METEOR's paraphrase table,
    about 10 CPU-seconds. metrics/test_meteor_server.py checks the scores against a process's own METEOR."""
    if shutil.which("java") is None:
        yield None
        return
    from crossmodal.metrics.meteor_server import SharedMeteor

    with SharedMeteor() as meteor:
        os.environ.update(meteor.env)  # inherited by every process a test starts
        try:
            yield meteor
        finally:
            for key in meteor.env:
                os.environ.pop(key, None)
