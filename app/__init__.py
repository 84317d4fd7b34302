"""svc: a credit-metered chat gateway that speaks three client APIs (OpenAI's Chat
Completions and Responses, Anthropic's Messages) and charges each request in credits.

Its packages, each the owner of one part, import downward only (``pyproject.toml``'s
import contracts; docs/architecture.md draws the layers).
"""

__version__ = "0.1.0"
"""pyproject.toml's version, as svc names itself to the services it calls (their
user-agent) and in its OpenAPI document."""
