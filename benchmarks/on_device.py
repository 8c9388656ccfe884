"""What the paper-size benchmarks share to run on a CPU or a CUDA GPU: the `--device` and `--amp` options, moving
named inputs, timing that waits for the GPU, peak memory, and the results' file names (`<name>.md` for the CPU,
`<name>_cuda.md` for a GPU, so one machine's figures never overwrite the other's)."""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import resource
import time

import torch

THREADS = int(os.environ.get("CROSSMODAL_THREADS", 2))  # the CPU's torch threads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--amp", action="store_true", help="bf16 autocast on the training forward pass (as "
                        "compute.amp: the weights, gradients and optimiser stay fp32)")


def child_arguments(args: argparse.Namespace) -> list[str]:
    """The options to hand a child process measuring one configuration."""
    return ["--device", args.device] + (["--amp"] if args.amp else [])


def start(device: str) -> torch.device:
    """The torch device, after setting the CPU's thread count (CROSSMODAL_THREADS, default 2)."""
    torch.set_num_threads(THREADS)
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    return torch.device(device)


def autocast(device: torch.device, amp: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def moved(inputs: dict, device: torch.device) -> dict:
    """Named inputs (`Padded` pairs) on the device."""
    return {name: type(item)(*(t.to(device) for t in item)) for name, item in inputs.items()}


def seconds(fn, device: torch.device) -> float:
    """Wall time of fn(), waiting for the GPU's queued work before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    begin = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - begin


def peak_gib(device: torch.device) -> float:
    """Peak memory: the GPU's allocated tensors on CUDA, else the process's peak resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def machine(device: str) -> str:
    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    return f"{platform.machine()}, {os.cpu_count()} cores"


def stem(name: str, args: argparse.Namespace) -> str:
    """The results' file name: `<name>`, `_cuda` on a GPU, `_amp` under autocast."""
    return name + ("" if args.device == "cpu" else f"_{args.device}") + ("_amp" if args.amp else "")
