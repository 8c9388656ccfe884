"""The synthetic world's backbone and its region features (the Faster R-CNN analogue)."""
