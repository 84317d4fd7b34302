"""The money: the Lua scripts (one per atomic operation, package data in ``lua/``) and
their typed caller, accounts and purchased grants, spotlight rewards, and the sweeper
that refunds reservations of dead workers.
"""
