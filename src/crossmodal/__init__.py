"""crossmodal-repro: reproducible pipelines for five papers on cross-modal and higher-order attention."""
import os

# MLflow's telemetry stays off (offline by default), set before any of our processes imports MLflow: the stages'
# MLflow workers (tracking.py) and the stage server (pipeline/stage_server.py), whose children share its import
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
