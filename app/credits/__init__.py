"""The money: the Lua scripts (one per atomic operation, package data in ``lua/``), their
typed caller (``ledger``), and the sweeper that refunds the reservations of dead workers.
"""
