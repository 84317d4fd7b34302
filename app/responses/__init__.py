"""The Responses API (``POST /v1/responses``): requests translated into svc's chat
completions, and their streams written as Responses events."""
