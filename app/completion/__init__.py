"""The completion engine every client API runs on (``app.apis``; it knows none of them):
the request, the alias catalog and its prices, the upstream router, the completion from
reservation to settlement, and graceful shutdown of open streams.
"""
