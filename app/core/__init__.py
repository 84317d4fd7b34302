"""The ground floor: settings, errors, ids, the clock's day rules, token arithmetic, logging,
metrics, request decoding and private files. Imports nothing of svc's.
"""
