"""Compute settings (training/distributed.py): two gloo processes launched through the stage's own torchrun path
against one process, lazy against in-memory features, SCST under DDP, device choice, CPU-only saved weights.

One module-scoped tiny world (synthesized and preprocessed by the CLI, random region features) serves every
test; the runs use Up-Down without dropout or scheduled sampling, so one and two processes differ only in
float summation order. 41 training images in batches of 10 leave a last batch of one image, so one rank gets
an empty share there.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from cli_process import crossmodal

from crossmodal import paths
from crossmodal.config.compute import ComputeConfig
from crossmodal.config.loader import load
from crossmodal.config.training import TrainConfig
from crossmodal.data.karpathy import read_karpathy
from crossmodal.data.regions import write_region_file
from crossmodal.io import InputError
from crossmodal.tasks.objectives.scst import self_critical_loss
from crossmodal.tasks.objectives.xe import Objective, caption_batch, caption_rows_once, sequence_loss, with_eos
from crossmodal.training import distributed
from crossmodal.training.trainer import Trainer

pytestmark = pytest.mark.slow  # CLI and torchrun processes

ROOT = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a GPU machine)")
CUDA = {"device": "cuda", "amp": False}  # fp32, to compare with the CPU
CUDA_AUTO = {"device": "cuda", "amp": "auto"}  # the GPU's default: bf16 autocast
CUDA_TOLERANCE = 1e-4  # max |parameter difference| between fp32 on a GPU and on the CPU (other summation orders)
TOLERANCE = 1e-7  # max |parameter difference| between 1 and 2 processes (measured 1.5e-8: see distributed.py)
UPDOWN = {"model_args": {"embed_dim": 16, "hidden_dim": 16, "att_hidden_dim": 16, "dropout": 0.0,
                         "feature_dropout": 0.0},
          "train": {"max_epochs": 2, "batch_size": 10, "optimizer": "sgd", "lr": 0.05}}  # Adam: see distributed.py


def write_params(repo: Path, name: str, compute: dict, runtime: dict | None = None, edit=None) -> Path:
    """The repo's params with `compute` and `runtime` merged in and `edit(params)` applied, as `name`."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["compute"] = {**params.get("compute", {}), **compute}
    params["runtime"] = {**params.get("runtime", {}), **(runtime or {})}
    if edit:
        edit(params)
    (repo / name).write_text(yaml.safe_dump(params, sort_keys=False))
    return repo / name


@pytest.fixture(scope="module", autouse=True)
def caption_scores_without_java():
    """Where Java is missing (a GPU machine's image; the PTB tokenizer and METEOR need it), the captioning task scores
    by CIDEr-D over whitespace tokens, for the CPU's and the GPU's runs alike, so that they still compare: these
    tests check the training, not the metric. Where Java is, nothing changes."""
    if shutil.which("java"):
        yield
        return
    from crossmodal.metrics.cider import CiderD
    from crossmodal.tasks import captioning

    def cider(predictions, references):
        ids = sorted(predictions)
        return float(np.mean(CiderD().score([predictions[i] for i in ids], [references[i] for i in ids])))

    patch = pytest.MonkeyPatch()
    patch.setattr(captioning, "start_meteor", lambda: None)
    patch.setattr(captioning, "cider_only", cider)
    patch.setattr(captioning, "evaluate_captions", lambda predictions, references: {
        "CIDEr": cider(predictions, references)})
    yield
    patch.undo()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A tiny world with two trained systems declared: `tiny` (Up-Down) and `tiny_scst` continuing it."""
    torch.set_num_threads(1)
    repo = tmp_path_factory.mktemp("distributed")
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    base, scst = params["baselines"]["systems"]["updown"], params["baselines"]["systems"]["updown_scst"]
    params["world"]["images"] = {"train": 41, "val": 8, "test": 8}
    params["world"]["image_size"] = 48
    params["evaluation"]["beam_size"] = 2
    params["runtime"]["threads"] = 1
    params["compute"]["amp"] = False  # the tolerance bounds fp32 summation order; bf16 rounds far coarser
    for paper in ("aoanet", "xlan", "eta"):
        params.pop(paper)
    params["baselines"] = {"systems": {
        "tiny": {**base, "model_args": UPDOWN["model_args"], "train": UPDOWN["train"]},
        "tiny_scst": {**scst, "init": "tiny", "train": {"max_epochs": 1, "batch_size": 10, "lr": 1e-3,
                                                        "scst": {"samples": 2}}}}}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    crossmodal(repo, "synthesize")
    crossmodal(repo, "prepro-captions")
    ids = [img.image_id for img in read_karpathy(repo / paths.DATASET_JSON)]
    rng = np.random.default_rng(0)
    counts = rng.integers(2, 7, len(ids))
    write_region_file(repo / paths.REGIONS, ids, [np.tile([0, 0, 8, 8], (n, 1)) for n in counts],
                      [rng.standard_normal((n, 12)) for n in counts], [(48, 48)] * len(ids), "random (test)")
    return repo


def train_in_process(repo: Path, name: str, compute: dict | None = None, edit=None,
                     **runtime) -> tuple[dict, dict, dict]:
    """One process, in this interpreter: the final metrics, the (best) weights and the last checkpoint."""
    cfg = load(write_params(repo, "params_single.yaml", compute or {}, runtime, edit))
    shutil.rmtree(repo / paths.CHECKPOINTS, ignore_errors=True)
    trainer = Trainer(cfg, name, repo, progress=False)
    result = trainer.run()
    return result, trainer.model.state_dict(), torch.load(trainer.checkpoint, weights_only=False)


@pytest.fixture(scope="module")
def two_processes(repo) -> dict:
    """`train --system tiny` with compute.processes 2 (gloo, lazy features): the stage relaunches under torchrun."""
    params = write_params(repo, "params_ddp.yaml", {"processes": 2}, {"lazy_features": True})
    crossmodal(repo, "--params", params.name, "train", "--system", "tiny")
    assert not list((repo / paths.CHECKPOINTS).rglob("*.pt"))  # rank 0 removed its finished checkpoint
    return json.loads((repo / paths.METRICS / "tiny.json").read_text())


@pytest.fixture(scope="module")
def one_process(repo) -> tuple[dict, dict, dict]:
    return train_in_process(repo, "tiny")


def assert_trained_alike(what: str, ours: tuple[dict, dict], theirs: tuple[dict, dict], tolerance: float,
                         rel: float) -> None:
    """Two runs' (metrics, weights): parameters within `tolerance`, the same best epoch, the same curve of training
    losses (to `rel`) and learning rates."""
    (result, weights), (reference, reference_weights) = ours, theirs
    assert weights.keys() == reference_weights.keys()
    diff = max((weights[k] - reference_weights[k]).abs().max().item() for k in reference_weights)
    print(f"max |parameter difference|, {what}: {diff:.3g}")
    assert diff <= tolerance, diff
    assert result["best_epoch"] == reference["best_epoch"]
    for row, other in zip(result["history"], reference["history"], strict=True):
        assert row["train_loss"] == pytest.approx(other["train_loss"], rel=rel) and row["lr"] == other["lr"]


def cpu_only(*tensor_maps: dict, checkpoint: dict) -> bool:
    """Whether the tensors of the maps and of a checkpoint (its weights, best state and optimiser state) are CPU's."""
    tensors = [*(t for m in tensor_maps for t in m.values()), *checkpoint["model"].values(),
               *checkpoint["best"]["state"].values(),
               *(t for s in checkpoint["optimizer"]["state"].values() for t in s.values())]
    return all(t.device.type == "cpu" for t in tensors)


def test_two_gloo_processes_through_torchrun_match_one_process(repo, two_processes, one_process):
    single, weights, _ = one_process
    saved = torch.load(repo / paths.MODELS / "tiny" / "model.pt", weights_only=False)["state_dict"]
    assert_trained_alike("2 processes vs 1", (two_processes, saved), (single, weights), TOLERANCE, 1e-6)
    assert two_processes["mlflow_run_id"]  # rank 0 logged the one MLflow run


def test_saved_model_and_checkpoint_hold_cpu_tensors(repo, two_processes, one_process):
    _, weights, checkpoint = one_process
    saved = torch.load(repo / paths.MODELS / "tiny" / "model.pt", weights_only=False)["state_dict"]
    assert cpu_only(saved, weights, checkpoint=checkpoint)


def test_scst_runs_in_two_processes(repo, two_processes):
    params = write_params(repo, "params_ddp.yaml", {"processes": 2})
    crossmodal(repo, "--params", params.name, "train", "--system", "tiny_scst")
    metrics = json.loads((repo / paths.METRICS / "tiny_scst.json").read_text())
    (row,) = metrics["history"]
    assert metrics["objective"] == "scst" and np.isfinite(row["train_loss"]) and row["train_CIDEr_beam"] >= 0
    start = torch.load(repo / paths.MODELS / "tiny" / "model.pt", weights_only=False)["state_dict"]
    end = torch.load(repo / paths.MODELS / "tiny_scst" / "model.pt", weights_only=False)["state_dict"]
    assert any(not torch.equal(start[k], end[k]) for k in start)


def test_lazy_features_train_exactly_as_in_memory(repo, one_process):
    in_memory, weights, _ = one_process
    lazy, lazy_weights, _ = train_in_process(repo, "tiny", lazy_features=True, loader_workers=1)
    assert all(torch.equal(weights[k], lazy_weights[k]) for k in weights)
    assert lazy["history"] == in_memory["history"] and lazy["predictions"] == in_memory["predictions"]


class RecordingRun:
    """Stands in for the MLflow run (tracking.Run): every `log_metrics` call, in order."""

    def __init__(self):
        self.calls: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step=0):
        self.calls.append((step, dict(metrics)))

    def set_tag(self, key, value):
        pass


def test_the_trainer_logs_each_epoch_and_the_chosen_one_on_the_tables_scale(repo):
    """The shared trainer gives MLflow the best epoch and its value (the runs table sorts by them; a curve's
    column shows its last epoch), the task's metric ×100 as the tables print it, losses as they are."""
    cfg = load(write_params(repo, "params_single.yaml", {}))
    shutil.rmtree(repo / paths.CHECKPOINTS, ignore_errors=True)
    run = RecordingRun()
    result = Trainer(cfg, "tiny", repo, progress=False).run(run)
    epochs = [(step, logged) for step, logged in run.calls if step]
    assert [step for step, _ in epochs] == [1, 2]
    for (_, logged), row in zip(epochs, result["history"], strict=True):
        assert logged["val_CIDEr"] == pytest.approx(100 * row["val_CIDEr"], abs=1e-4)
        assert logged["train_loss"] == row["train_loss"] and logged["lr"] == row["lr"]
    final = run.calls[-1][1]
    assert final["best_epoch"] == result["best_epoch"] and set(final) >= {"seconds_train", "seconds_test"}
    assert final["best_val_CIDEr"] == pytest.approx(100 * result["best_val_CIDEr"], abs=1e-4)
    assert final["best_val_CIDEr"] == max(logged["val_CIDEr"] for _, logged in epochs)
    assert result["best_val_CIDEr"] <= 10  # what the metrics file gets keeps pycocoevalcap's scale


def test_losses_divided_by_the_global_share_add_up_to_the_single_process_loss():
    """Each of two ranks divides its shard's summed loss by (global count / 2); their mean is the batch's loss."""
    torch.manual_seed(0)
    seqs = torch.tensor([[4, 5, 0], [6, 0, 0], [4, 4, 4], [5, 6, 0]])
    cases = {sequence_loss: (torch.log_softmax(torch.randn(4, 4, 8), -1), seqs, 0.1),
             self_critical_loss: (-torch.rand(4, 3), seqs, torch.randn(4))}
    shards = [slice(0, 3), slice(3, 4)]  # uneven, as ranks' shares of a batch can be
    for loss, args in cases.items():
        def shard(s: slice) -> list:
            return [a[s] if isinstance(a, torch.Tensor) else a for a in args]

        counts = []
        for s in shards:
            loss(*shard(s), share=lambda count: counts.append(count) or count)
        parts = [loss(*shard(s), share=lambda count: sum(counts) / 2) for s in shards]
        torch.testing.assert_close(sum(parts) / 2, loss(*args))


def test_caption_batch_repeats_references_and_takes_empty_shares():
    from crossmodal.data.captions import CaptionLabels

    labels = CaptionLabels(np.array([7, 8]), np.arange(12, dtype=np.int32).reshape(4, 3), np.array([0, 3]),
                           np.array([3, 4]))
    assert caption_batch(labels, np.array([1, 0]), 2).tolist() == [[9, 10, 11], [9, 10, 11], [0, 1, 2], [3, 4, 5]]
    assert caption_batch(labels, np.array([], dtype=np.int64), 2).shape == (0, 3)


def test_caption_rows_once_takes_each_reference_once_image_by_image():
    from crossmodal.data.captions import CaptionLabels

    labels = CaptionLabels(np.array([7, 8]), np.arange(12, dtype=np.int32).reshape(4, 3), np.array([0, 3]),
                           np.array([3, 4]))
    targets, counts = caption_rows_once(labels, np.array([1, 0]))
    assert targets.tolist() == [[9, 10, 11], [0, 1, 2], [3, 4, 5], [6, 7, 8]] and counts.tolist() == [1, 3]
    empty, none = caption_rows_once(labels, np.array([], dtype=np.int64))
    assert empty.shape == (0, 3) and none.tolist() == []


def _captioners():
    from crossmodal.models.att2in import Att2in
    from crossmodal.models.transformer import Transformer, TransformerArgs

    torch.manual_seed(0)
    yield Att2in(Att2in.Args(embed_dim=8, hidden_dim=8, att_hidden_dim=8, dropout=0.0, feature_dropout=0.0), 9,
                 {"regions": 4})  # the shared step loop (models/base.py)
    yield Transformer(TransformerArgs(dim=8, heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=16, dropout=0.0),
                      9, {"regions": 4})  # its own parallel forward


@pytest.mark.parametrize("model", list(_captioners()), ids=["att2in", "transformer"])
def test_caption_rows_once_is_the_cross_entropy_of_each_reference_once(model):
    """`train.caption_rows: once`: the objective's loss is the token mean of -log p over every reference of every
    image once, each image's rows decoded from its own inputs: a loop over the images and their references."""
    from crossmodal.data.captions import CaptionLabels
    from crossmodal.data.inputs import Padded

    g = torch.Generator().manual_seed(1)
    counts = [3, 1, 2]
    refs = torch.randint(4, 9, (sum(counts), 4), generator=g)
    refs[1, 2:] = 0  # shorter captions, 0-padded
    refs[4, 3:] = 0
    ends = np.cumsum(counts)
    labels = CaptionLabels(np.arange(3), refs.numpy().astype(np.int32), ends - counts, ends)
    inputs = {"regions": Padded(torch.randn(3, 5, 4, generator=g), torch.tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 5],
                                                                                 dtype=torch.bool))}
    task = type("Task", (), {"train_labels": labels, "device": torch.device("cpu"),
                             "system": type("System", (), {"train": TrainConfig(caption_rows="once")})})
    objective = Objective(task)
    objective.start_epoch(1)
    model.eval()
    loss, _ = objective.loss(lambda f: f(model), model, np.arange(3), inputs, None)
    total, tokens = 0.0, 0
    for i in range(3):
        one = {"regions": Padded(inputs["regions"].values[i:i + 1], inputs["regions"].mask[i:i + 1])}
        for r in range(ends[i] - counts[i], ends[i]):
            full, mask = with_eos(refs[r:r + 1])
            logprobs = model(one, refs[r:r + 1], 1)
            total += -(logprobs.gather(2, full.unsqueeze(2)).squeeze(2) * mask).sum().item()
            tokens += int(mask.sum())
    assert loss.item() == pytest.approx(total / tokens, rel=1e-5)


def test_device_choice_and_the_cpu_only_checks():
    if torch.cuda.is_available():
        pytest.skip("checks the behaviour of a machine without CUDA")
    assert distributed.resolve_device(ComputeConfig()) == torch.device("cpu")
    with pytest.raises(InputError, match="compute.device is cuda, but torch sees no CUDA device"):
        distributed.resolve_device(ComputeConfig(device="cuda"))
    with pytest.raises(InputError, match="nccl needs CUDA"):
        distributed.launch(ComputeConfig(processes=2, backend="nccl"), ["train", "--system", "x"])


def test_a_launch_says_where_its_processes_run(monkeypatch, capsys):
    """Several processes under `device: auto` on a machine without CUDA run on the CPU over gloo: the launch says so
    before torchrun starts (the command it starts is not run here)."""
    started = []
    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(distributed.subprocess, "run", lambda cmd: started.append(cmd) or SimpleNamespace(returncode=0))
    assert distributed.launch(ComputeConfig(processes=4), ["train", "--system", "x"]) == 0
    assert "--nproc_per_node=4" in started[0]
    assert capsys.readouterr().err == ("distributed: 4 processes on the CPU (compute.device is auto and torch sees no "
                                       "CUDA device; compute.device: cuda refuses instead), over gloo\n")
    distributed.launch(ComputeConfig(processes=2, device="cpu", backend="gloo"), ["train", "--system", "x"])
    assert capsys.readouterr().err == "distributed: 2 processes on the CPU, over gloo\n"


def test_cpu_amp_is_deterministic_bf16_autocast_and_auto_follows_native_bf16(monkeypatch):
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    off = distributed.Precision(ComputeConfig(amp=False), torch.device("cpu"))
    with off.autocast():
        assert layer(x).dtype == torch.float32
    on = distributed.Precision(ComputeConfig(amp=True), torch.device("cpu"))
    assert on.dtype == torch.bfloat16 and not on.scaler.is_enabled()  # bf16 needs no gradient scaling
    with on.autocast():
        first, second = layer(x), layer(x)
    assert first.dtype == torch.bfloat16 and torch.equal(first, second)
    assert not torch.equal(first.float(), layer(x))  # it changes the numbers: hence recorded, and a switch
    for native in (True, False):
        monkeypatch.setattr(distributed.environment, "native_bf16", lambda: native)
        auto = distributed.Precision(ComputeConfig(amp="auto"), torch.device("cpu"))
        assert auto.dtype == (torch.bfloat16 if native else None)
        portable = distributed.Precision(ComputeConfig(amp="auto", portable=True), torch.device("cpu"))
        assert portable.dtype is None  # portable kernels must agree with CPUs that lack bf16
    with pytest.raises(ValueError, match="amp must be true, false or auto"):
        ComputeConfig(amp="yes")


def test_the_stage_relaunches_itself_unless_torchrun_started_it(monkeypatch):
    for key in ("LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert distributed.needs_launch(ComputeConfig(processes=2)) and not distributed.needs_launch(ComputeConfig())
    assert distributed.launch_command(2, ["train", "--system", "x"]) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "crossmodal",
        "train", "--system", "x"]
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not distributed.needs_launch(ComputeConfig(processes=2))


def test_a_failing_process_fails_the_stage(repo, two_processes):
    params = write_params(repo, "params_ddp.yaml", {"processes": 2})
    model = repo / paths.MODELS / "tiny" / "model.pt"
    backup = model.read_bytes()
    try:
        model.unlink()
        proc = crossmodal(repo, "--params", params.name, "train", "--system", "tiny_scst", check=False)
    finally:
        model.write_bytes(backup)
    assert proc.returncode != 0 and "missing file" in proc.stderr


# ---- CUDA (skipped on a machine without one; on a GPU machine: pytest tests/training/test_distributed.py -k cuda)


@needs_cuda
def test_cuda_fp32_trains_as_the_cpu_does_and_saves_cpu_tensors(repo, one_process):
    cpu, cpu_weights, _ = one_process
    gpu, weights, checkpoint = train_in_process(repo, "tiny", CUDA)
    assert "cuda" in checkpoint["rng"]  # it trained on the GPU (whose random state the checkpoint keeps)
    assert_trained_alike("CUDA fp32 vs CPU", (gpu, weights), (cpu, cpu_weights), CUDA_TOLERANCE, 1e-4)
    assert cpu_only(weights, checkpoint=checkpoint)


@needs_cuda
def test_cuda_amp_auto_is_bf16_autocast():
    assert distributed.Precision(ComputeConfig(), torch.device("cuda")).dtype == torch.bfloat16


@needs_cuda
def test_cuda_runs_give_the_same_bits_twice(repo):
    first, weights, _ = train_in_process(repo, "tiny", CUDA_AUTO)
    second, again, _ = train_in_process(repo, "tiny", CUDA_AUTO)
    assert all(torch.equal(weights[k], again[k]) for k in weights)
    assert first["history"] == second["history"] and first["predictions"] == second["predictions"]
    assert first["history"][-1]["train_loss"] < first["history"][0]["train_loss"]  # bf16 autocast still learns


@needs_cuda
def test_cuda_training_killed_mid_run_resumes_to_the_same_bits(repo, monkeypatch):
    straight, weights, _ = train_in_process(repo, "tiny", CUDA_AUTO)
    original = Trainer.train_epoch

    def killed_in_the_second_epoch(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt("killed")
        return original(self, epoch)

    cfg = load(write_params(repo, "params_single.yaml", CUDA_AUTO))
    shutil.rmtree(repo / paths.CHECKPOINTS, ignore_errors=True)
    monkeypatch.setattr(Trainer, "train_epoch", killed_in_the_second_epoch)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, "tiny", repo, progress=False).run()
    monkeypatch.setattr(Trainer, "train_epoch", original)
    trainer = Trainer(cfg, "tiny", repo, progress=False)
    resumed = trainer.run()
    assert resumed["history"] == straight["history"] and resumed["predictions"] == straight["predictions"]
    assert all(torch.equal(weights[k], v) for k, v in trainer.model.state_dict().items())


@needs_cuda
def test_more_processes_than_gpus_are_refused_before_launching():
    gpus = torch.cuda.device_count()
    with pytest.raises(InputError, match=f"compute.processes is {gpus + 1}, but this machine has {gpus} CUDA"):
        distributed.launch(ComputeConfig(device="cuda", processes=gpus + 1), ["train", "--system", "x"])


def beam_scst(params: dict) -> None:
    """The tiny SCST run with its candidates from a beam search against the other beams' mean (as the SCST recipe)."""
    params["baselines"]["systems"]["tiny_scst"]["train"]["scst"].update(candidates="beam", baseline="mean")


@needs_cuda
def test_cuda_scst_from_beams_trains_as_the_cpu_does_and_gives_the_same_bits_twice(repo):
    cpu_params = {"device": "cpu", "amp": False}
    init = Trainer(load(write_params(repo, "params_single.yaml", cpu_params)), "tiny", repo, progress=False)
    init.run()
    init.save_model()  # the SCST runs' starting weights, trained on the CPU
    cpu = train_in_process(repo, "tiny_scst", cpu_params, beam_scst)[:2]
    gpu = train_in_process(repo, "tiny_scst", CUDA, beam_scst)[:2]
    # the same candidates, so the same rewards; the loss's relative tolerance is wider than the XE test's because
    # the mean baseline centres each image's advantages, so the loss is a small sum of cancelling terms (measured
    # on an H200: parameters 6.9e-6 apart, losses 2.25618e-5 against 2.25585e-5)
    assert [r["train_CIDEr_sample"] for r in gpu[0]["history"]] == [r["train_CIDEr_sample"] for r in cpu[0]["history"]]
    assert_trained_alike("CUDA fp32 vs CPU, SCST from beams", gpu, cpu, CUDA_TOLERANCE, 1e-3)
    first, again = (train_in_process(repo, "tiny_scst", CUDA_AUTO, beam_scst)[:2] for _ in range(2))
    assert all(torch.equal(first[1][k], again[1][k]) for k in first[1]) and first[0]["history"] == again[0]["history"]
    start = torch.load(repo / paths.MODELS / "tiny" / "model.pt", weights_only=False)["state_dict"]
    assert any(not torch.equal(start[k], first[1][k].cpu()) for k in start)
