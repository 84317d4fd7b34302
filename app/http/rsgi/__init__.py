"""svc over granian's RSGI: the one place that knows the server.

granian serves ``app.rsgi:app``, a ``gateway.Gateway``: the two streaming endpoints go
straight to ``app.http.streams`` through an ``exchange.RSGIExchange`` (each chunk one
``send_bytes`` into granian, no framework per chunk), every other request to the Litestar
app through the ASGI adapter (``asgi_bridge``), whose lifespan runs from granian's RSGI
hooks (``lifespan``). ``protocol`` holds the shapes of granian's objects that the tests'
in-process transport fakes and tests/e2e/test_granian_contract.py checks against granian.

Why RSGI and not Litestar ``@asgi`` handlers: docs/architecture.md, "Why the chat route
writes its own bytes" (measured, issue 31).
"""
