"""Which providers serve an alias, in fallback order."""

from __future__ import annotations

from typing import NamedTuple

from app.chat.catalog import SIMULATED, Alias
from app.upstream.base import Provider
from app.upstream.simulated import SimulatedProvider


class Candidate(NamedTuple):
    """One way to serve an alias: a provider (by its name in the models file) and model."""

    provider_name: str
    provider: Provider
    model: str


class UpstreamRouter:
    """Maps an alias (and the key's environment) to (provider, real model) pairs."""

    def __init__(self, providers: dict[str, Provider], simulated: SimulatedProvider) -> None:
        self.providers = {SIMULATED: simulated, **providers}
        self.simulated = simulated

    def candidates(self, alias: Alias, environment: str) -> list[Candidate]:
        """Test keys are always served by the simulated upstream, never a paid provider."""
        if environment == "test":
            return [Candidate(SIMULATED, self.simulated, "simulated")]
        return [
            Candidate(ref.provider, self.providers[ref.provider], ref.model)
            for ref in alias.upstreams
        ]

    async def close(self) -> None:
        for provider in self.providers.values():
            await provider.close()
