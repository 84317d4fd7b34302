"""The HTTP surface, which only routes: the RSGI app granian serves (``rsgi.gateway``), the
streaming endpoints it serves natively, one per API's dialect (``streams``), and the
Litestar routes behind an ASGI adapter (``app``, over ``rsgi.asgi_bridge``), the JSON routes
the dialects answer beside their streams among them (``beside``)."""
