"""Redis: the client (one server or a Cluster), the key layout and the field names of its
hashes. Everything else names Redis keys and fields through this package.
"""
