"""Operations: ``svc admin inspect``, ``reconcile`` and ``rebuild-redis``, and the embedded
Valkey of the zero-configuration mode.
"""
