"""Which providers serve an alias, in fallback order."""

from __future__ import annotations

from app.catalog import SIMULATED, Alias
from app.upstream.base import Provider
from app.upstream.simulated import SimulatedProvider


class UpstreamRouter:
    """Maps an alias (and the key's environment) to (provider, real model) pairs."""

    def __init__(self, providers: dict[str, Provider], simulated: SimulatedProvider) -> None:
        self.providers = {SIMULATED: simulated, **providers}
        self.simulated = simulated

    def candidates(self, alias: Alias, environment: str) -> list[tuple[Provider, str]]:
        """Test keys are always served by the simulated upstream, never a paid provider."""
        if environment == "test":
            return [(self.simulated, "simulated")]
        return [(self.providers[ref.provider], ref.model) for ref in alias.upstreams]

    async def close(self) -> None:
        for provider in self.providers.values():
            await provider.close()
