"""API keys: their format and digests, authentication (the hot path's cached identities and
the argon2 cold path) and the failed-auth throttle.
"""
