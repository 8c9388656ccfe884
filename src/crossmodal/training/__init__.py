"""The shared trainer, the captioning objectives, schedules and distribution."""
