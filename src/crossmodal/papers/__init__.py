"""The papers, one package each: `papers/<name>/`, named as its section of params.yaml and its pipelines/<name>/.

A paper's package holds what is its own:
- `paper.py`: its record, `PAPER` (a `Paper`): its name in the status table, and the hooks below;
- `tables/<id>.yaml`: the tables it reports, transcribed, with their claims (reports/table_schema.py);
- where it has them, its own params sections (`params.py`, read from `<name>.studies` in params.yaml), the stages
  that study its systems beyond training them (`pipeline.py`, whose `stages(cfg)` the pipeline generator calls),
  those stages' commands (`commands/<command>.py`, found by the CLI as `crossmodal/stages/` ones are) and its
  figures.
Models, modules, tasks and worlds stay in their shared layers, where papers share them (one multi-head attention
serves four papers); a paper's params section names them (`model:`, `task:`).

Nothing central names a paper. The config loader takes a paper's params section by its folder's name (a folder of
this package with a `paper.py`; config/loader.py), and the pipeline generator, the CLI and the index stage find the
rest through `registry.papers()`. docs/adding-a-paper.md walks through adding one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

@dataclass(frozen=True)
class Paper:
    """A paper's record. `figures(cfg)` returns the figures its own stages (its pipeline.py) draw that the index
    lists ({label: repository-relative PNG}), with `captions` ({PNG file name: caption}); `studies` the schemas of
    its params sections under `<name>.studies` ({section: dataclass}), which `check(cfg)` validates as strictly as
    the loader validates the rest of params.yaml."""

    name: str
    title: str | None = None  # its name in the status table (reports/index.md, the README); None: not a paper of
    order: int = 0  # its own (the baselines that several papers' tables share); its row there, from the top
    studies: Mapping[str, type] = field(default_factory=dict)
    figures: Callable[[Any], Mapping[str, Path]] | None = None
    captions: Mapping[str, str] = field(default_factory=dict)
    attention: Mapping[str, str] | None = None  # the index's attention figure of its decoder, reports/attention.py
    # `Mechanism`'s fields: the trained `system` drawn, the attention `module` in its model, its `method`, a `title`

    def study(self, cfg, section: str) -> Any:
        """The params section `<name>.studies.<section>`, built as its dataclass (strict keys, by key path)."""
        from ..config.loader import build  # the loader's strictness and messages

        if section not in self.studies:
            raise KeyError(f"{self.name} declares no study section {section!r}")
        return build(self.studies[section], cfg.paper(self.name).studies.get(section), f"{self.name}.studies.{section}")

    def check(self, cfg) -> None:
        """Fail with one line on an unknown or invalid key under `<name>.studies`."""
        from ..config.loader import unknown_key

        for section in cfg.paper(self.name).studies:
            if section not in self.studies:
                raise unknown_key(f"{self.name}.studies.{section}", section, list(self.studies))
            self.study(cfg, section)
