"""Stage `hoca_cost`: HOCA's Table 3 measured, the computing cost of whole models (params `hoca.studies.cost`).

Each row (`hoca.studies.cost.rows`: HOCA-U, HOCA-UBT, L-HOCA-UBT on the MSR-VTT-like data) is its system with the
paper's model size (`hoca.studies.cost.model_args` over the system's own) and batch (`batch_size` clips), trained by
the shared trainer for `epochs` epochs in a fresh process of its own (`--measure <row>`, so that one row's memory
never counts in another's). Measured there:
- `train_seconds`: wall time of the training epochs (no validation, no test);
- `space_gib`: peak memory above the process's memory just before the model was built: on the CPU the peak resident
  set (VmHWM) minus the resident set then, so the interpreter, torch and the loaded features do not count; on a GPU
  the CUDA allocator's peak. The paper's "space" is its GPU's use for the whole model.

The paper trains 100 epochs; its figures are totals. Ours are the measured epochs only: the table compares ratios.
Each row writes reports/metrics/<row>.json ({"variant", "test": {"space_gib", "train_seconds"}, "epochs", ...}), which
the table reads like any system's metrics. The numbers are timings: they differ between runs and machines."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


from .... import paths
from ....config.loader import repo_root
from ....io import InputError, load_yaml, write_json
from ....stage_common import progress, record_environment, set_threads
from ..paper import PAPER

ARGUMENTS = {"--measure": "one row of hoca.studies.cost.rows, measured in this process (the stage runs each so)"}
OPTIONAL = ("--measure",)


def _rss_gib(field: str) -> float:
    """This process's VmRSS or VmHWM (its peak), in GiB."""
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20
    raise InputError(f"/proc/self/status has no {field}: memory is measured on Linux only")


def row_config(cfg, params_path: Path, row: str):
    """The config with `row` as a system: its measured system at the paper's model size and batch, trained exactly
    `hoca.studies.cost.epochs` epochs (no early stopping)."""
    from ....config.loader import from_data

    cost = PAPER.study(cfg, "cost")
    system = cost.rows[row]
    data = load_yaml(params_path.read_text())
    data[cfg.paper_of(system)]["systems"][row] = {
        "of": system, "model_args": dict(cost.model_args),
        "train": {"batch_size": cost.batch_size, "max_epochs": cost.epochs, "patience": 0}}
    return from_data(data)


def measure(cfg, root: Path, params_path: Path, row: str) -> dict:
    import torch

    from ....training.trainer import Trainer

    set_threads(cfg)
    config = row_config(cfg, params_path, row)
    before = _rss_gib("VmRSS")
    trainer = Trainer(config, row, root, progress=progress(cfg))
    cuda = trainer.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(trainer.device)
    start = time.perf_counter()
    for epoch in range(config.systems()[row].train.max_epochs):
        trainer.train_epoch(epoch)
    seconds = time.perf_counter() - start
    space = torch.cuda.max_memory_allocated(trainer.device) / 2**30 if cuda else _rss_gib("VmHWM") - before
    cost = PAPER.study(cfg, "cost")
    return {"variant": row, "system": cost.rows[row], "test": {"space_gib": space, "train_seconds": seconds},
            "epochs": config.systems()[row].train.max_epochs, "batch_size": cost.batch_size,
            "model_args": dict(config.model_of(row).model_args),
            "memory": "CUDA peak allocated" if cuda else "peak RSS above the RSS before the model was built",
            "environment": record_environment(None, str(trainer.device))}


def run(cfg, root: Path, args) -> None:
    params_path = Path(args.params) if args.params else repo_root() / "params.yaml"
    rows = PAPER.study(cfg, "cost").rows
    unknown = [f"{row} -> {s}" for row, s in rows.items() if s not in cfg.systems() or row in cfg.systems()]
    if unknown:
        raise InputError(f"hoca.studies.cost.rows: {unknown[0]}: a row needs a new name and an existing system")
    if args.measure:
        if args.measure not in rows:
            raise InputError(f"--measure: {args.measure!r} is not a row of hoca.studies.cost.rows ({', '.join(rows)})")
        print(json.dumps(measure(cfg, root, params_path, args.measure)))
        return
    summary = {}
    for row in rows:
        command = [sys.executable, "-m", "crossmodal", "--params", str(params_path), "hoca-cost", "--measure", row]
        done = subprocess.run(command, cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            raise InputError(f"hoca_cost: measuring {row} failed: {done.stderr.strip().splitlines()[-1:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        write_json(root / paths.METRICS / f"{row}.json", result)
        summary[row] = result["test"]
    print(json.dumps(summary))
