"""InferenceGym: RL environments for LLM-inference serving on a calibrated discrete-event simulator."""

__version__ = "0.1.0"
