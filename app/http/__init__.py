"""The HTTP surface: Litestar routes, the streaming endpoint and the app factory."""
