"""What no response body may show: tracebacks, source paths, exception class names,
framework, driver, backend or SQL words."""

from __future__ import annotations

import re

INTERNALS = re.compile(
    r"Traceback|File \"|site-packages|\.py\b|\b[A-Z][A-Za-z]*(?:Error|Exception)\b"
    r"|(?i:\b(?:redis|valkey|sqlite|psycopg|postgres|litestar|msgspec|granian|lua)\b)"
    r"|\b(?:SELECT|INSERT INTO|UPDATE|DELETE FROM)\b"
)
