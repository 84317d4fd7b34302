"""Which providers serve an alias, in fallback order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from app.completion.catalog import SIMULATED, Alias
from app.completion.costs import UpstreamCost
from app.core.metrics import METRICS
from app.upstream.base import Provider
from app.upstream.simulated import SimulatedProvider


class Candidate(NamedTuple):
    """One way to serve an alias: a provider (by its name in the models file), the model,
    and what the provider charges for it (None: not known)."""

    provider_name: str
    provider: Provider
    model: str
    cost: UpstreamCost | None = None


class UpstreamRouter:
    """Maps an alias (and the key's environment) to (provider, real model) pairs."""

    def __init__(
        self,
        providers: dict[str, Provider],
        simulated: SimulatedProvider,
        aliases: Iterable[Alias] = (),
    ) -> None:
        """``aliases``: those served, whose priced upstreams' cost series are made now."""
        self.providers = {SIMULATED: simulated, **providers}
        self.simulated = simulated
        METRICS.upstream_costs_known(
            (alias.id, ref.provider, ref.cost.currency)
            for alias in aliases
            for ref in alias.upstreams
            if ref.cost is not None
        )

    def candidates(self, alias: Alias, environment: str) -> list[Candidate]:
        """Test keys are always served by the simulated upstream, never a paid provider."""
        if environment == "test":
            return [Candidate(SIMULATED, self.simulated, "simulated")]
        return [
            Candidate(ref.provider, self.providers[ref.provider], ref.model, ref.cost)
            for ref in alias.upstreams
        ]

    async def close(self) -> None:
        for provider in self.providers.values():
            await provider.close()
