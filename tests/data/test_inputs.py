"""Named model inputs (data/inputs.py): the checks every model and decoder relies on."""
import subprocess
import sys

import pytest
import torch

from crossmodal.data.inputs import Padded, batch_size, check_inputs


def _padded(batch=2, n=3, *trailing, dtype=torch.float32):
    values = torch.zeros(batch, n, *trailing, dtype=dtype)
    return Padded(values, torch.ones(batch, n, dtype=torch.bool))


def test_valid_inputs_pass_and_give_the_batch_size():
    inputs = {"regions": _padded(2, 3, 6), "grid": _padded(2, 49, 4), "words": _padded(2, 5, dtype=torch.long)}
    check_inputs(inputs, ["regions", "grid"])
    check_inputs(inputs, ())
    assert batch_size(inputs) == 2
    values, mask = inputs["regions"]  # a Padded unpacks like the pair it is
    assert values.shape == (2, 3, 6) and mask.dtype == torch.bool


def test_a_missing_name_is_named():
    with pytest.raises(ValueError, match=r"missing input\(s\) 'grid'; got \['regions'\]"):
        check_inputs({"regions": _padded(2, 3, 6)}, ("regions", "grid"))
    with pytest.raises(ValueError, match="no inputs"):
        batch_size({})


@pytest.mark.parametrize("mask", [
    torch.ones(2, 4, dtype=torch.bool),  # N differs from the values'
    torch.ones(3, 3, dtype=torch.bool),  # B differs
    torch.ones(2, 3, 1, dtype=torch.bool),  # not [B, N]
    torch.ones(2, 3),  # float, not bool
    torch.ones(2, 3, dtype=torch.long),
], ids=["length", "batch", "rank", "float", "long"])
def test_a_bad_mask_is_refused(mask):
    with pytest.raises(ValueError, match="input 'regions': mask must be \\[B, N\\] bool"):
        check_inputs({"regions": Padded(torch.zeros(2, 3, 6), mask)}, ["regions"])


def test_values_need_batch_and_length_dims_and_inputs_must_be_padded():
    with pytest.raises(ValueError, match="mask must be"):
        check_inputs({"regions": Padded(torch.zeros(2), torch.ones(2, dtype=torch.bool))}, [])
    with pytest.raises(ValueError, match="must be a Padded"):
        check_inputs({"regions": (torch.zeros(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))}, [])


def test_batch_sizes_must_agree_across_inputs():
    with pytest.raises(ValueError, match="differ in batch size: regions 2, grid 3"):
        check_inputs({"regions": _padded(2, 3, 6), "grid": _padded(3, 49, 4)}, ["regions"])


@pytest.mark.slow  # a Python process
def test_the_module_imports_torch_only():
    code = ("import sys; import crossmodal.data.inputs; "
            "print(sorted(m for m in sys.modules if m.startswith('crossmodal')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['crossmodal', 'crossmodal.data', 'crossmodal.data.inputs']"
