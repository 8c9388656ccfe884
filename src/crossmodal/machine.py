"""Which CPU this is, as /proc/cpuinfo names it: the identity that times and calibrations are recorded against.

A time means something only with its machine, and the model name alone does not say which machine: the AVX-512
EPYC that made the first results and a Zen 5 EPYC both call themselves "AMD EPYC". The vendor, CPU family, model
and stepping tell the generations apart; the flags say which kernel paths torch can take (AVX2, AVX-512,
native bf16, AMX), which is what makes one CPU faster, or give other bits, than another.

No torch import: `python -m crossmodal.pipeline.repro` and the benchmarks' calibration helper read this before (or
without) starting torch; environment.py records it in every stage's environment block.
"""
from __future__ import annotations

import functools
import os
import platform
import re

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")  # the kernel paths that matter here
IDENTITY = ("vendor", "model_name", "family", "model")  # what makes two CPUs the same type, for timing


def parse_cpuinfo(text: str) -> dict:
    """The first processor's identity in /proc/cpuinfo's text: vendor, model name, family, model, stepping (as
    the text has them; missing ones are None), the FLAGS it has (None without a flags line), and the logical
    processors listed."""
    fields: dict[str, str] = {}
    processors = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processors += 1
        if key and key not in fields:
            fields[key] = value.strip()
    flags = set(fields["flags"].split()) if "flags" in fields else None
    return {"vendor": fields.get("vendor_id"), "model_name": fields.get("model name"),
            "family": fields.get("cpu family"), "model": fields.get("model"), "stepping": fields.get("stepping"),
            "flags": None if flags is None else [f for f in FLAGS if f in flags], "processors": processors or None}


def parse_processor(text: str) -> dict:
    """What a platform without /proc/cpuinfo says (platform.processor()): on Windows "Intel64 Family 6 Model 85
    Stepping 7, GenuineIntel", which carries the generation; elsewhere a name at most."""
    found = re.search(r"Family (\d+) Model (\d+) Stepping (\d+), (\w+)", text)
    family, model, stepping, vendor = found.groups() if found else (None,) * 4
    return {"vendor": vendor, "model_name": text or platform.machine() or None, "family": family, "model": model,
            "stepping": stepping, "flags": None, "processors": None}


@functools.cache
def cpu_identity() -> dict:
    """This machine's CPU (parse_cpuinfo), with the cores this process may use; where /proc/cpuinfo is missing
    (not Linux) only what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            identity = parse_cpuinfo(f.read())
    except OSError:
        identity = parse_processor(platform.processor())
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 0)
    return {**identity, "cores_usable": len(usable)}


def same_type(a: dict, b: dict) -> bool:
    """Whether two identities name one CPU type (vendor, model name, family, model; stepping and cores aside)."""
    return all(a.get(k) == b.get(k) for k in IDENTITY)


def describe(identity: dict) -> str:
    """One line for a report: `AMD EPYC (AuthenticAMD, family 26, model 2, stepping 1; avx2 avx512f ...)`."""
    flags = " ".join(identity.get("flags") or []) or "none of " + "/".join(FLAGS)
    return (f"{identity.get('model_name')} ({identity.get('vendor')}, family {identity.get('family')}, model "
            f"{identity.get('model')}, stepping {identity.get('stepping')}; {flags})")
