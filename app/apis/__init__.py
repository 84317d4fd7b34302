"""The client APIs svc serves, each a ``Dialect`` of the completion engine
(``app.completion``): ``chat``, ``responses`` and ``messages``, which know nothing of each
other."""
