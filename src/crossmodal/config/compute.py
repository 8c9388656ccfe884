"""The sections of how stages run: where training computes (`compute`, which can change numbers), how a
process runs (`runtime`, which cannot) and how the test split is decoded (`evaluation`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComputeConfig:
    """Where training runs (training/distributed.py): device, mixed precision, DDP processes. Each can change the
    numbers a stage produces, so every training stage depends on this section."""

    device: str = "auto"  # auto (CUDA when available) | cpu | cuda
    amp: bool | str = "auto"  # mixed precision (autocast): true | false | auto (where the device computes bf16
    # natively: a CUDA GPU with bf16, a CPU with AVX-512 BF16 or AMX); changes the numbers
    processes: int = 1  # > 1: the stage relaunches itself under torchrun, one DDP process each
    backend: str = "auto"  # auto (nccl on CUDA, gloo on CPU) | nccl | gloo
    portable: bool = False  # pin the CPU kernel paths (environment.py), so that x86-64 CPUs agree bit for bit

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, not {self.device!r}")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend must be auto, nccl or gloo, not {self.backend!r}")
        if self.processes < 1:
            raise ValueError("processes must be at least 1")
        if not isinstance(self.amp, bool) and self.amp != "auto":
            raise ValueError(f"amp must be true, false or auto, not {self.amp!r}")


@dataclass(frozen=True)
class RuntimeConfig:
    """How a stage runs, never what it computes: no stage depends on this section (pipelines.py lists none of
    it), so changing it reruns nothing. Lazy reading gives the same batches as in-memory reading (tested); the
    thread count is part of the machine a number was made on (like its CPU), not of the recipe."""

    threads: int = 0  # torch threads per process; 0: min(2, cores per process)
    lazy_features: bool = False  # read features per batch from HDF5 (COCO scale) instead of all at once
    loader_workers: int = 0  # DataLoader worker processes of the lazy reader
    progress: bool = True  # progress bars and per-epoch lines (CROSSMODAL_PROGRESS=0 turns them off too)

    def __post_init__(self) -> None:
        if self.threads < 0 or self.loader_workers < 0:
            raise ValueError("threads and loader_workers must be at least 0")


@dataclass(frozen=True)
class EvaluationConfig:
    beam_size: int = 3
    max_length: int = 16
    batch_size: int = 100
    qualitative_examples: int = 8
