"""``svc admin``: the operator commands, run against Redis and the durable store directly,
whether a server is up or not. ``commands`` declares them (arguments, options, help texts);
``actions`` runs the one named and prints its result.
"""
