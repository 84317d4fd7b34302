"""Usage: the flusher that makes settled usage durable exactly once, and the reader behind
``GET /v1/usage``.
"""
