"""MARS: margin-adversarial risk-controlled stopping for parallel LLM test-time scaling."""

__version__ = "0.1.0"
