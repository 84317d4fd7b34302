"""svc: a credit-metered, OpenAI-compatible chat completion gateway."""

__version__ = "0.1.0"
