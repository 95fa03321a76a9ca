"""tuner: measures vLLM serving configurations on real servers and recommends the best."""

__version__ = "0.1.0"
