"""The shared trainer, its learning-rate schedules and distribution (the captioning objectives: tasks/objectives/)."""
