"""The HTTP surface: the RSGI app granian serves (``gateway``), its native streaming
endpoint (``chat``), and the Litestar routes behind an ASGI adapter (``asgi_bridge``)."""
