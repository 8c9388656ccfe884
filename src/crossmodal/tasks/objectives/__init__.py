"""The captioning task's objectives, one module per `objective:` of a system (xe.py, scst.py), each defining
`Objective(task)`: tasks/captioning.py imports the system's own by name, so a stage's code closure holds only it."""
