"""A chat completion: the request, the alias catalog and its prices, the upstream router,
chunk encoding, the completion from reservation to settlement, and graceful shutdown of
open streams.
"""
