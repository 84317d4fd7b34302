"""The ground floor: settings, errors, ids, the clock's day rules, token arithmetic, logging,
metrics, request decoding, private files and the data folder's files. Imports nothing of
svc's.
"""
