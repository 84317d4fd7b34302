"""Redis: the client (one server or a Cluster), the key layout, the field names of its
hashes and what a start asks of the server (``startup_checks``). Everything else names Redis
keys and fields through this package.
"""
