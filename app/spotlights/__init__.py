"""Spotlight rewards proven by signature: ad networks' server-side verification callbacks and
signed callbacks."""
