"""Credits bought through a store svc verifies. Stripe first: the ``Stripe-Signature`` of a
webhook event (``stripe_signature``), the events svc reads, normalized (``stripe_events``),
and the share of a purchase's credits a refund takes back (``refunds``). Plain functions, no
I/O: the purchase ledger applies what they describe."""
