"""ETA's grid features (features/grid.py): each cell the mean of the feature map inside its box."""
import pytest
import torch

from crossmodal.features.grid import cell_boxes, grid_features


@pytest.mark.parametrize("height, width, size", [(24, 24, 7), (16, 20, 3), (7, 7, 7), (5, 9, 2)])
def test_grid_cells_are_the_mean_of_the_pixels_inside_their_boxes(height, width, size):
    fmap = torch.randn(2, 3, height, width, dtype=torch.float64)
    cells = grid_features(fmap, size)
    boxes = cell_boxes(size, width, height)
    assert cells.shape == (2, size * size, 3) and boxes.shape == (size * size, 4)
    for k, (x1, y1, x2, y2) in enumerate(boxes.astype(int)):
        torch.testing.assert_close(cells[:, k], fmap[:, :, y1:y2, x1:x2].mean((2, 3)))
    assert boxes[0, 0] == boxes[0, 1] == 0 and boxes[-1, 2] == width and boxes[-1, 3] == height
