import sys

from .pipeline.stage_client import run_on_server

status = run_on_server(sys.argv[1:])  # None: no stage server to run it (pipeline/stage_server.py)
if status is None:
    from .cli import main

    status = main()
sys.exit(status)
