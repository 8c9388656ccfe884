"""The shared METEOR scorer (metrics/meteor_server.py): through its socket a stage gets the score its own METEOR
would give, requests at once are all answered, a failure reaches the stage, and without the scorer a process scores
on its own."""
from __future__ import annotations

import shutil
import threading

import pytest

from crossmodal.metrics import captions
from crossmodal.metrics.meteor_server import SharedMeteor

pytestmark = [pytest.mark.slow,  # METEOR's JVM
              pytest.mark.skipif(shutil.which("java") is None, reason="METEOR needs java")]

GTS = {7: ["a man rides a horse on the beach", "a person on a horse"], 3: ["two dogs play in the snow", "dogs in snow"],
       5: ["a red bus on a street"]}  # not in key order: the lines go to METEOR in this order either way
RES = {7: ["a man riding a horse"], 3: ["a dog in the snow"], 5: ["a bus on the road"]}


def test_the_shared_scorer_gives_each_request_the_score_the_process_would_compute(monkeypatch, tmp_path):
    """One JVM throughout (each start loads METEOR's paraphrase table): the server, in this process, scores on the
    process's own METEOR, as it does in the scheduler's."""
    local = captions.local_meteor_score(GTS, RES)
    monkeypatch.setenv(captions.SHARED_METEOR, str(tmp_path / "gone"))  # no scorer there: scored here, the same
    assert captions._meteor_score(GTS, RES) == local
    with SharedMeteor() as meteor:
        monkeypatch.setenv(captions.SHARED_METEOR, meteor.env[captions.SHARED_METEOR])
        captions.start_meteor()
        scores = []
        threads = [threading.Thread(target=lambda: scores.append(captions._meteor_score(GTS, RES))) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert scores == [local] * 3 and meteor.requests == 3
        bad = {key: [*caps, "a second prediction"] for key, caps in RES.items()}  # pycocoevalcap takes one each
        with pytest.raises(RuntimeError, match="METEOR"):  # as the process's own METEOR would fail
            captions._meteor_score(GTS, bad)
        assert meteor.requests == 3
    assert not meteor.path.exists() and captions._meteor_instance is None  # its JVM stopped with it
