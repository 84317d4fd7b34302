"""API keys: their format and digests, authentication (the hot path's cached identities and
the argon2 cold path), the failed-auth throttle, what a key's role and environment let it
do, and the operators' tokens (admin and metrics).
"""
