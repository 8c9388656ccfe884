"""Atomic outputs: saved models are byte-stable (DVC hashes them) and a failed write leaves the target alone."""
import pytest
import torch

from crossmodal.io import atomic_path, save_torch


def test_equal_objects_save_to_identical_bytes_whatever_the_temporary_name(tmp_path):
    state = {"weights": torch.arange(6.0).view(2, 3), "epoch": 3}
    save_torch(state, tmp_path / "a" / "model.pt")
    save_torch(state, tmp_path / "b" / "model.pt")
    first, second = (tmp_path / "a" / "model.pt").read_bytes(), (tmp_path / "b" / "model.pt").read_bytes()
    assert first == second
    assert torch.equal(torch.load(tmp_path / "a" / "model.pt")["weights"], state["weights"])


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "model.pt"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
