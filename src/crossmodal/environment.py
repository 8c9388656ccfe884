"""What a number depends on besides code, params and data, and the switch that pins the part of it we can pin.

A float32 training run is a long chain of sums whose order the kernels choose: ATen's vectorised kernels (their
width comes from the CPU capability ATen detects: AVX512, AVX2, ...), MKL's BLAS (it picks a code branch per
CPU) and oneDNN's JIT kernels (per ISA). The same params therefore give bit-identical results on one CPU type
with one thread count, and different last bits, which training amplifies, on another CPU
(docs/reproducibility.md). So every stage that computes metrics records `describe()`: the CPU (name, generation, kernel
flags), the kernel paths, the threads and the library versions, in its metrics file and as MLflow tags.

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
from .machine import cpu_identity

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


KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # the CPU flags that decide which kernels run
UNKNOWN = "unknown"


def cpu_block(identity: dict) -> dict:
    """The block's CPU entries from a CPU identity (machine.py): `cpu`, the model name; `cpu_id`, the generation
    (vendor, family, model, stepping), since the model name alone can hide it (the Zen 3 and the Zen 4 our numbers
    came from both report "AMD EPYC") and the generation decides the kernels and so the bits; `cpu_flags`, whether
    it has each of KERNEL_FLAGS. "unknown" for what the platform does not say."""
    flags = identity.get("flags")
    return {"cpu": identity.get("model_name") or platform.machine() or UNKNOWN,
            "cpu_id": {key: UNKNOWN if identity.get(key) is None else identity[key]
                       for key in ("vendor", "family", "model", "stepping")},
            "cpu_flags": {flag: UNKNOWN if flags is None else flag in flags for flag in KERNEL_FLAGS}}


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (the avx512_bf16 or amx_bf16 flag of /proc/cpuinfo); elsewhere
    torch emulates bf16, slower than fp32."""
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_identity().get("flags") or ()))


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
    """This process's environment block: CPU (name, generation, kernel flags), kernel paths, threads, device, library
    versions (imports torch)."""
    import torch

    return {
        **cpu_block(cpu_identity()),
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
    """One line for a table heading: 'CPU AVX512, 2 threads (AMD EPYC, family 26, model 2)' (+ portable mode, a
    GPU). The family and model tell apart generations that share a name; a block recorded before they were (no
    `cpu_id`) or on a CPU that does not say shows the name alone."""
    text = f"CPU {block['cpu_capability']}, {block['threads']} thread{'s' if block['threads'] != 1 else ''}"
    if block.get("portable"):
        text += ", portable kernels"
    if block.get("device", "cpu") != "cpu":
        text += f", {block['device']}"
    ident = block.get("cpu_id") or {}
    generation = [f"{key} {ident[key]}" for key in ("family", "model") if ident.get(key, UNKNOWN) != UNKNOWN]
    return f"{text} ({', '.join([block['cpu'], *generation])})"


def tags(block: dict) -> dict[str, str]:
    """The block as flat MLflow tags: env.cpu, env.cpu_id.family, env.cpu_flags.avx512f, env.versions.torch, ..."""
    flat: dict[str, str] = {}
    for key, value in block.items():
        if isinstance(value, dict):
            flat.update({f"env.{key}.{k}": str(v) for k, v in value.items()})
        else:
            flat[f"env.{key}"] = str(value)
    return flat
