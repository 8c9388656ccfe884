"""The tasks' specs (task_specs.py): each task module's validation metric is its spec's, and the reports that read
the specs (figures, the index page, the claims) load no torch."""
from __future__ import annotations

import subprocess
import sys

from crossmodal.task_specs import SPECS


def test_each_task_takes_its_metric_from_its_spec():
    from crossmodal.tasks.captioning import Captioning
    from crossmodal.tasks.grounding import Grounding
    from crossmodal.tasks.vqa import Vqa

    assert {cls.metric for cls in (Captioning, Vqa, Grounding)} == {spec.metric for spec in SPECS.values()}
    assert [SPECS[t].metric for t in ("captioning", "vqa", "grounding")] == [Captioning.metric, Vqa.metric,
                                                                             Grounding.metric]


def test_the_reports_read_the_specs_without_torch():
    code = ("import sys; import crossmodal.reports.figures, crossmodal.reports.index_page, crossmodal.reports.claims; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
