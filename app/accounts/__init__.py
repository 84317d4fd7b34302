"""Accounts and what their owners and operators do with them: create accounts and API keys,
list and revoke keys, grant purchased credits, reward spotlight views. The operations the
admin API, the CLI and ``/v1`` share; the money moves through ``app.credits``.
"""
