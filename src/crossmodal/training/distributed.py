"""Where training runs: the device, mixed precision, and data parallelism over processes launched by torchrun.

The default (`compute` as in params.yaml: device auto, amp auto, one process, features in memory) is the path
every committed result was trained on: on this project's CPU (AVX-512 BF16) that is fp32 weights with bf16
autocast.

Device. `compute.device: auto` is CUDA when `torch.cuda.is_available()`, else the CPU; `cuda` without CUDA is an
InputError. Under torchrun on CUDA each process takes the GPU of its LOCAL_RANK. Saved weights and checkpoints
are CPU tensors, so they load on a CPU-only machine.

Mixed precision. Under autocast the training forward passes and losses (teacher forcing; SCST's greedy baseline
and sampling) compute their matrix products in a 16-bit type; weights, gradients and the optimiser stay fp32.
`compute.amp: true`: bf16 where the GPU supports it, else fp16 with a gradient scaler; bf16 on any CPU. `auto`
(the default): bf16 where the device computes it natively (a CUDA GPU with bf16; a CPU with AVX-512 BF16 or AMX,
`environment.native_bf16`, unless `compute.portable` pins the kernels), else fp32, because emulated bf16 is slower
than fp32. `false`: fp32. On this CPU bf16 made an epoch 1.06-1.43x faster (benchmarks/results/levers.md; its
converged runs against fp32's: docs/performance.md). It keeps same-CPU determinism but changes the numbers, so the
environment block records `cpu_bf16`. Validation and test decoding stay in fp32 (beam
search compares sums of log-probabilities).

Processes. With `compute.processes: N > 1`, `python -m crossmodal train` (the DVC stage) relaunches itself as
`python -m torch.distributed.run --standalone --nproc_per_node N -m crossmodal ...` and exits with torchrun's
status; each process joins one process group (backend auto: nccl on CUDA, gloo on CPU). The trainer
(trainer.py) and the tasks' losses (tasks/) then keep the single-process semantics:
- the global batch is still `train.batch_size` images, in the single-process order (same seeds, lr schedule and
  steps); rank r takes rows r, r + N, ... of every global batch (in a last batch of fewer than N images a rank
  may get none: it still steps, contributing zero gradient);
- the model is wrapped in DistributedDataParallel, which averages gradients over the ranks; each rank divides
  its summed loss by `share` = (count summed over ranks) / N, the count being the batch's tokens (cross-entropy)
  or sampled tokens (SCST; not samples, as its loss is a per-token mean): the single-process losses are means
  over exactly these, so the averaged gradient equals the single-process one up to float summation order;
- rank 0 validates, keeps the best state, checkpoints, decodes the test split and writes every output and the
  MLflow run; the other ranks wait for its validation CIDEr-D (a broadcast: the plateau schedule needs it), so
  rank 0's validation must finish within the process group's timeout (`TIMEOUT`), and they end after the
  last epoch. Resume: every rank loads rank 0's checkpoint (a resumed run ends exactly as an uninterrupted
  one with the same number of processes, dropout and SCST sampling included). A process that fails fails the
  stage, with torchrun's status (1) and its report after the process's own `error: ...` line;
- random draws inside training (dropout, scheduled sampling, SCST samples): rank 0 keeps the single-process
  streams, rank r > 0 draws from streams seeded by (seed, epoch, r). With dropout, scheduled sampling or SCST, a
  multi-process run is therefore an equally valid run, not the same numbers.
Ensembles only decode and always run in one process (on `compute.device`).

Measured on CPU (tests/training/test_distributed.py: Up-Down without dropout or scheduled sampling, 41 images in
batches of 10, 2 epochs = 10 steps, 2 gloo processes through torchrun against one process): with SGD (momentum 0.9,
lr 0.05) the largest parameter difference is 1.5e-8, about one float32 ulp of the weights; the test allows
1e-7. With Adam (lr 0.01) it is 9e-6 after one step and 7.5e-5 after 10: Adam divides each gradient by its
own running magnitude, so a parameter whose gradient is near 0 turns float noise of ~1e-9 into an update of
up to lr. The gradients agree; Adam's normalisation amplifies their last bits.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, ContextManager, Iterator

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .. import environment
from ..config.compute import ComputeConfig
from ..io import InputError

TIMEOUT = timedelta(hours=1)  # the longest a rank waits in a collective (rank 0's validation decode included)


def resolve_device(compute: ComputeConfig) -> torch.device:
    """This process's device: `compute.device` (auto: CUDA when available), the LOCAL_RANK GPU under torchrun."""
    cuda = torch.cuda.is_available()
    if compute.device == "cuda" and not cuda:
        raise InputError("compute.device is cuda, but torch sees no CUDA device (a CPU-only build or no GPU); "
                         "use auto or cpu")
    if compute.device == "cpu" or not cuda:
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))


def deterministic_cuda() -> None:
    """Make CUDA's kernels give the same bits run to run, as the CPU's do: deterministic algorithms where torch has
    them (a warning names any op that has none), a fixed cuBLAS workspace (read when cuBLAS starts, so this runs
    before the first CUDA matrix product), no cuDNN autotuning. Called only for a CUDA device: CPU runs keep their
    kernels, and their numbers."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


def _backend(compute: ComputeConfig, device: torch.device) -> str:
    if compute.backend == "nccl" and device.type != "cuda":
        raise InputError("compute.backend nccl needs CUDA devices; use gloo or auto on the CPU")
    if compute.backend != "auto":
        return compute.backend
    return "nccl" if device.type == "cuda" else "gloo"


class Precision:
    """Autocast and gradient scaling for the training forward passes (see the module docstring)."""

    def __init__(self, compute: ComputeConfig, device: torch.device):
        self.device_type = device.type
        self.dtype = None
        if compute.amp == "auto" and device.type == "cuda":
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        elif compute.amp == "auto":  # portable kernels must agree across CPUs with and without native bf16
            self.dtype = torch.bfloat16 if environment.native_bf16() and not compute.portable else None
        elif compute.amp and device.type == "cuda":
            self.dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        elif compute.amp:
            self.dtype = torch.bfloat16
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.dtype == torch.float16)

    def autocast(self) -> ContextManager:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.dtype is not None)


# ---- launching


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def needs_launch(compute: ComputeConfig) -> bool:
    """True in the process a stage starts when it should train in `compute.processes` processes instead."""
    return compute.processes > 1 and not launched_by_torchrun()


def launch_command(processes: int, cli_args: list[str]) -> list[str]:
    """torchrun (from this interpreter's torch) running `python -m crossmodal <cli_args>` in `processes` processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "crossmodal", *cli_args]


def launch(compute: ComputeConfig, cli_args: list[str]) -> int:
    """Run the command under torchrun, after the checks that would otherwise fail in every process; its status.
    It says first where the processes run: under `compute.device: auto` a machine without CUDA runs them on the CPU
    (over gloo), which a user who asked for several GPUs must not learn from the run's time."""
    device = resolve_device(compute)
    backend = _backend(compute, device)
    if device.type == "cuda" and compute.processes > torch.cuda.device_count():
        raise InputError(f"compute.processes is {compute.processes}, but this machine has "
                         f"{torch.cuda.device_count()} CUDA devices")
    where = "CUDA devices" if device.type == "cuda" else "the CPU" + (
        " (compute.device is auto and torch sees no CUDA device; compute.device: cuda refuses instead)"
        if compute.device == "auto" else "")
    print(f"distributed: {compute.processes} processes on {where}, over {backend}", file=sys.stderr, flush=True)
    return subprocess.run(launch_command(compute.processes, cli_args)).returncode


# ---- the processes


class Forward(nn.Module):
    """Runs any computation of a model, `fn(model, *args)`, as this module's forward: DistributedDataParallel
    synchronises the gradients of computations run through its own forward only, and SCST samples through
    `step`, not through the model's forward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable, *args):
        return fn(self.model, *args)


@dataclass(frozen=True)
class Context:
    """This process's place in the run: rank, number of processes, device; the collectives the trainer uses,
    each the identity in a single process."""

    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0

    def on_main(self, open_context: Callable[[], ContextManager]) -> ContextManager:
        """`open_context()` on rank 0 (the MLflow run, say); a context yielding None on the other ranks."""
        return open_context() if self.main else contextlib.nullcontext()

    def wrap(self, model: nn.Module) -> nn.Module:
        """`model` behind `Forward`, in DistributedDataParallel when there are several processes. The graph is
        static (every step uses the same parameters; a rank with no rows still runs them all on an empty
        batch), and `static_graph` lets DDP find the parameters some models never use (X-LAN's last key
        update) once, in the first step."""
        forward = Forward(model)
        if self.world == 1:
            return forward
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(forward, device_ids=ids, static_graph=True)

    def stream_seed(self, seed: int) -> int:
        """The seed of this rank's random stream: `seed` itself on rank 0, a distinct one elsewhere."""
        return seed + 1_000_003 * self.rank

    def all_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return tensor
        total = tensor.detach().to(self.device, copy=True)
        dist.all_reduce(total)
        return total

    def share(self, count: torch.Tensor) -> torch.Tensor:
        """Divisor of a rank's summed loss: the count summed over ranks / world (DDP averages gradients over
        ranks), so that the averaged gradient is the single-process one; `count` itself in one process."""
        return count if self.world == 1 else self.all_sum(count) / self.world

    def broadcast(self, value: float) -> float:
        """Rank 0's `value` on every rank."""
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.broadcast(tensor, src=0)
        return float(tensor.item())

    def epoch_means(self, steps: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
        """Per key, the mean over steps of (sum over ranks of step sums) / (sum over ranks of step counts)."""
        keys = list(steps)
        table = self.all_sum(torch.tensor([steps[k] for k in keys], dtype=torch.float64)).cpu().numpy()
        return {k: float(np.mean(t[:, 0] / t[:, 1])) for k, t in zip(keys, table)}


def current(compute: ComputeConfig) -> Context:
    """The context of this process: from the process group when one is set up, else a single process."""
    if dist.is_available() and dist.is_initialized():
        return Context(dist.get_rank(), dist.get_world_size(), resolve_device(compute))
    return Context(0, 1, resolve_device(compute))


@contextlib.contextmanager
def process_group(compute: ComputeConfig) -> Iterator[Context]:
    """Join torchrun's process group when launched by it with several processes, and leave it at the end."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        yield current(compute)
        return
    device = resolve_device(compute)
    backend = _backend(compute, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=TIMEOUT, device_id=device if device.type == "cuda" else None)
    try:
        yield current(compute)
    finally:
        dist.destroy_process_group()
