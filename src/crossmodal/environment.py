"""What a number depends on besides code, params and data, and the switch that pins the part of it we can pin.

A float32 training run is a long chain of sums whose order the kernels choose: ATen's vectorised kernels (their
width comes from the CPU capability ATen detects: AVX512, AVX2, ...), MKL's BLAS (it picks a code branch per
CPU) and oneDNN's JIT kernels (per ISA). The same params therefore give bit-identical results on one CPU type
with one thread count, and different last bits, which training amplifies, on another CPU
(docs/reproducibility.md). So every stage that computes metrics records `describe()`: the CPU, the kernel paths, the
threads and the library versions, in its metrics file and as MLflow tags.

Portable mode (`compute.portable` in params.yaml) pins the kernel paths before torch is imported:
- `ATEN_CPU_CAPABILITY=avx2`: ATen's AVX2 kernels (any x86-64 CPU since ~2013 has AVX2 and FMA) instead of
  the widest the CPU offers;
- `MKL_CBWR=COMPATIBLE`: MKL's conditional numerical reproducibility, on its compatible branch. MKL documents
  the AVX2 branch as reproducible across *Intel* CPUs only: on other CPUs it falls back to the automatic branch
  (measured here: `MKL_CBWR=AVX2` on an AMD EPYC reports `CNR:AUTO` in MKL_VERBOSE). COMPATIBLE is the branch
  MKL runs the same on Intel and non-Intel x86 CPUs. MKL's guarantee also needs the same number of threads;
- `ONEDNN_MAX_CPU_ISA=AVX2`: oneDNN's JIT at most AVX2. oneDNN promises no bitwise equality across CPUs (its
  blocking may follow cache sizes); our CPU workloads do not reach oneDNN today (MKL_VERBOSE/ONEDNN_VERBOSE
  show SGEMM calls only), so this cap is there for models that will.
What stays outside it: the thread count (part of the recorded environment and of MKL's condition), the
library versions (pinned in requirements.lock), GPUs, and CPUs without AVX2.
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from importlib import metadata

from .io import InputError

KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
PORTABLE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def pin_kernel_paths(portable: bool) -> None:
    """Set the portable mode's variables for this process and its children (torchrun, the tracking worker);
    nothing when `portable` is false (variables the user set stay as they are, and are recorded). Must run
    before torch is imported: the libraries read them once, when they start."""
    if not portable:
        return
    if "torch" in sys.modules and any(os.environ.get(k) != v for k, v in PORTABLE.items()):
        raise InputError("compute.portable is true, but torch was imported before its kernel paths could be "
                         "pinned: run the stage as `python -m crossmodal ...` (or set "
                         + " ".join(f"{k}={v}" for k, v in PORTABLE.items()) + " yourself)")
    os.environ.update(PORTABLE)


@functools.cache
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (the avx512_bf16 or amx_bf16 flag of /proc/cpuinfo); elsewhere
    torch emulates bf16, slower than fp32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return False


@functools.cache
def _java_version() -> str:
    """The first line of `java -version` (METEOR and the PTB tokenizer run on it), or "unavailable"."""
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else "unavailable"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe(device: str = "cpu") -> dict:
    """This process's environment block: CPU, kernel paths, threads, device, library versions (imports torch)."""
    import torch

    return {
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": native_bf16(),
        "threads": torch.get_num_threads(),
        "portable": all(os.environ.get(k) == v for k, v in PORTABLE.items()),
        "kernel_variables": {k: os.environ[k] for k in KERNEL_VARIABLES if k in os.environ},
        "device": torch.cuda.get_device_name(device) if str(device).startswith("cuda") else "cpu",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "numpy": _version("numpy"), "pycocoevalcap": _version("pycocoevalcap"),
                     "java": _java_version()},
    }


def summary(block: dict) -> str:
    """One line for a table heading: 'CPU AVX512, 2 threads' (+ the CPU model, portable mode, a GPU)."""
    text = f"CPU {block['cpu_capability']}, {block['threads']} thread{'s' if block['threads'] != 1 else ''}"
    if block.get("portable"):
        text += ", portable kernels"
    if block.get("device", "cpu") != "cpu":
        text += f", {block['device']}"
    return f"{text} ({block['cpu']})"


def tags(block: dict) -> dict[str, str]:
    """The block as flat MLflow tags: env.cpu, env.threads, env.versions.torch, ..."""
    flat: dict[str, str] = {}
    for key, value in block.items():
        if isinstance(value, dict):
            flat.update({f"env.{key}.{k}": str(v) for k, v in value.items()})
        else:
            flat[f"env.{key}"] = str(value)
    return flat
