"""Accounts and what their owners and operators do with them: the operations the admin API,
the CLI and ``/v1`` share. The money moves through ``app.credits``.

- ``accounts``: ``Accounts``: creating, finding and disabling an account, its purchased
  grants and balance.
- ``api_keys``: ``ApiKeys``, an account's keys (on an account ``Accounts`` finds):
  creation, listing, updates, rotation, revocation, the limit on active keys, and the key
  events sent to webhooks.
- ``bodies``: the request bodies of these operations, their limits, and the checks
  decoding cannot make.
- ``answers``: what they answer (a balance, a key as created, listed or revoked) and the
  one mapping of each from its record.
- ``rewards``: spotlight rewards (earned credits for verified views).
- ``lookup``: finding accounts (what an operator's ``query`` may name, a page of them).
"""
