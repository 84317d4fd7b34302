"""Upstream providers: where completions come from, behind one small interface (``base``):
the models file's provider settings, OpenAI-compatible HTTP providers, the simulated one;
and the HTTP clients of svc's other outbound calls (``outbound``: webhooks, AdMob's keys).
"""
