"""Upstream providers: where completions come from, behind one small interface (``base``):
the models file's provider settings, OpenAI-compatible HTTP providers, the simulated one.
"""
