"""Webhooks: an account's receivers of events, the events' outbox, signed deliveries."""
