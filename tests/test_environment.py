"""The environment a number depends on (crossmodal.environment): recorded, summarised, and pinned by the
portable mode, which must change the kernel paths the process reports and give byte-identical model files."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crossmodal.environment import (KERNEL_FLAGS, KERNEL_VARIABLES, PORTABLE, cpu_block, describe, pin_kernel_paths,
                                    summary, tags)
from crossmodal.machine import parse_cpuinfo, parse_processor
from crossmodal.io import InputError

pytestmark = pytest.mark.slow  # two processes training in portable mode

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import os, sys
from crossmodal.environment import pin_kernel_paths
pin_kernel_paths(sys.argv[1] == "portable")
import torch
a = torch.ones(32, 32)
(a @ a).sum()
print("capability", torch.backends.cpu.get_cpu_capability(), flush=True)
"""


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_VARIABLES}
    env.update(PYTHONPATH=str(ROOT / "src"), **extra)
    return env


def _probe(mode: str) -> tuple[str, str]:
    """(capability ATen reports, MKL's CNR mode from MKL_VERBOSE) of a fresh process in `mode`."""
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=_clean_env(MKL_VERBOSE="1"), capture_output=True,
                         text=True, check=True, timeout=120).stdout
    capability = next(line.split()[1] for line in out.splitlines() if line.startswith("capability"))
    cnr = next(part for line in out.splitlines() if "SGEMM" in line for part in line.split() if part.startswith("CNR:"))
    return capability, cnr


def test_portable_mode_changes_the_kernel_paths_the_process_reports():
    default_capability, default_cnr = _probe("default")
    capability, cnr = _probe("portable")
    assert (capability, cnr) == ("AVX2", "CNR:COMPATIBLE")
    assert default_cnr == "CNR:OFF"  # MKL's conditional reproducibility is off unless asked for
    assert default_capability in ("AVX512", "AVX2", "DEFAULT", "ZVECTOR", "SVE256")


def test_pinning_after_torch_is_imported_is_refused(monkeypatch):
    import torch  # noqa: F401  (imported: the libraries have read their variables already)

    for key in KERNEL_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(InputError, match="before its kernel paths could be pinned"):
        pin_kernel_paths(True)
    pin_kernel_paths(False)  # the default changes nothing, so it is always allowed
    assert not any(key in os.environ for key in KERNEL_VARIABLES)


def test_the_block_records_cpu_kernels_threads_and_versions(monkeypatch):
    import torch

    monkeypatch.setenv("MKL_CBWR", "AVX2")
    block = describe()
    assert block["threads"] == torch.get_num_threads()
    assert block["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert block["kernel_variables"] == {"MKL_CBWR": "AVX2"} and block["portable"] is False
    assert set(block["versions"]) == {"python", "torch", "numpy", "pycocoevalcap", "java"}
    assert block["versions"]["torch"] == torch.__version__
    flat = tags(block)
    assert flat["env.threads"] == str(block["threads"]) and flat["env.kernel_variables.MKL_CBWR"] == "AVX2"
    assert flat["env.versions.torch"] == torch.__version__


def _cpuinfo(name: str, vendor: str, family: int, model: int, stepping: int, flags: str) -> str:
    """A /proc/cpuinfo of two alike processors, in the kernel's layout."""
    block = (f"processor\t: {{n}}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
             f"model name\t: {name}\nstepping\t: {stepping}\nflags\t\t: fpu sse2 {flags}\n")
    return "\n".join(block.format(n=n) for n in range(2))


ZEN3 = _cpuinfo("AMD EPYC", "AuthenticAMD", 25, 1, 1, "avx avx2 fma")
ZEN4 = _cpuinfo("AMD EPYC", "AuthenticAMD", 25, 17, 1, "avx avx2 fma avx512f avx512_bf16")
XEON = _cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 6, 143, 8,
                "avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile amx_int8")


def test_the_cpu_is_named_with_its_generation_and_kernel_flags():
    """Two EPYC generations that report the same model name are told apart by family and model, in the block and
    in the heading line; the flags say which kernels each can run."""
    blocks = {name: cpu_block(parse_cpuinfo(text)) for name, text in {"zen3": ZEN3, "zen4": ZEN4, "xeon": XEON}.items()}
    assert blocks["zen4"]["cpu"] == "AMD EPYC"
    assert blocks["zen4"]["cpu_id"] == {"vendor": "AuthenticAMD", "family": "25", "model": "17", "stepping": "1"}
    assert blocks["xeon"]["cpu_id"]["vendor"] == "GenuineIntel"
    assert blocks["zen3"]["cpu_flags"] == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_tile": False}
    assert blocks["xeon"]["cpu_flags"] == dict.fromkeys(KERNEL_FLAGS, True)
    lines = {name: summary({**block, "cpu_capability": "AVX2", "threads": 2, "portable": True, "device": "cpu"})
             for name, block in blocks.items()}
    assert lines["zen3"] == "CPU AVX2, 2 threads, portable kernels (AMD EPYC, family 25, model 1)"
    assert lines["zen4"] == "CPU AVX2, 2 threads, portable kernels (AMD EPYC, family 25, model 17)"
    assert lines["xeon"].endswith("(Intel(R) Xeon(R) Platinum 8480+, family 6, model 143)")


def test_a_cpu_without_proc_cpuinfo_is_named_as_far_as_the_platform_says():
    """Windows' processor string carries the generation; a platform that says nothing gives "unknown", never an
    error, and the heading line then names the CPU alone."""
    windows = cpu_block(parse_processor("Intel64 Family 6 Model 85 Stepping 7, GenuineIntel"))
    assert windows["cpu_id"] == {"vendor": "GenuineIntel", "family": "6", "model": "85", "stepping": "7"}
    bare = cpu_block(parse_processor(""))
    assert bare["cpu"] and set(bare["cpu_id"].values()) == {"unknown"}
    assert bare["cpu_flags"] == dict.fromkeys(KERNEL_FLAGS, "unknown")
    block = {**bare, "cpu": "arm64", "cpu_capability": "DEFAULT", "threads": 1, "device": "cpu"}
    assert summary(block) == "CPU DEFAULT, 1 thread (arm64)"


def test_this_machines_block_and_tags_carry_the_generation():
    block = describe()
    assert set(block["cpu_id"]) == {"vendor", "family", "model", "stepping"}
    assert set(block["cpu_flags"]) == set(KERNEL_FLAGS)
    if Path("/proc/cpuinfo").is_file():  # Linux: the kernel's own account of the first processor
        text = Path("/proc/cpuinfo").read_text()
        fields = dict(line.split(":", 1) for line in text.splitlines()[:30] if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "cpu family" in fields:  # x86
            assert block["cpu_id"]["family"] == fields["cpu family"] and block["cpu_id"]["model"] == fields["model"]
            assert f"family {fields['cpu family']}, model {fields['model']})" in summary(block)
        assert block["cpu_flags"]["avx2"] == ("avx2" in fields.get("flags", "").split())
    flat = tags(block)
    assert flat["env.cpu_id.family"] == str(block["cpu_id"]["family"])
    assert flat["env.cpu_flags.avx512f"] == str(block["cpu_flags"]["avx512f"])


def test_summary_names_capability_threads_and_mode():
    """A block recorded before the generation was (no `cpu_id`) keeps its line."""
    block = {"cpu": "Some CPU", "cpu_capability": "AVX512", "threads": 2, "portable": False, "device": "cpu"}
    assert summary(block) == "CPU AVX512, 2 threads (Some CPU)"
    assert summary({**block, "threads": 1, "portable": True}) == "CPU AVX512, 1 thread, portable kernels (Some CPU)"


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_two_runs_in_portable_mode_give_byte_identical_model_files(tmp_path):
    """The tiny world's backbone trained twice with `compute.portable: true`, each in a fresh process."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text("stages: {}\n")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["world"]["images"] = {"train": 40, "val": 10, "test": 10}
    params["world"]["image_size"] = 64
    params["backbone"].update(epochs=2, channels=8, feature_dim=16)
    params["compute"]["portable"] = True
    params["runtime"]["threads"] = 1  # as the tiny pipeline: the other pytest worker needs the core
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = _clean_env(CROSSMODAL_PROGRESS="0")

    def crossmodal(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "crossmodal", *args], cwd=repo, env=env, check=True, timeout=300,
                       capture_output=True)

    crossmodal("synthesize")
    digests = []
    for _ in range(2):
        crossmodal("pretrain-backbone")
        digests.append(_md5(repo / "data/models/backbone.pt"))
    assert digests[0] == digests[1]
    environment = json.loads((repo / "reports/metrics/backbone.json").read_text())["environment"]
    assert environment["portable"] is True and environment["cpu_capability"] == "AVX2"
    assert environment["kernel_variables"] == PORTABLE
