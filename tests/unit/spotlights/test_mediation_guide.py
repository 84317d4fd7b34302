"""The companion-app guide's MAX and LevelPlay script (docs/spotlights.md, "MAX and
LevelPlay") runs as written, and the callbacks it signs reward an intent in process, once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
GUIDE = Path(__file__).parents[3] / "docs" / "spotlights.md"
MARKER = "<!-- test: tests/unit/spotlights/test_mediation_guide.py runs this block -->"
KEYS = {"applovin": "test-event-key", "levelplay": "test-private-key"}  # as the guide sets


def _script() -> str:
    text = GUIDE.read_text()
    after = text[text.index(MARKER) + len(MARKER) :]
    opening = after.index("```python\n") + len("```python\n")
    return after[opening : after.index("```", opening)]


def _query(cwd: Path, network: str, intent: str, event: str) -> str:
    done = subprocess.run(
        [sys.executable, "mediation_test.py", network, KEYS[network], intent, event],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_the_guide_names_the_keys_this_test_uses() -> None:
    text = GUIDE.read_text()
    for network, key in KEYS.items():
        assert f"mediation_test.py {network} {key} " in text


async def test_the_guides_script_signs_rewarding_callbacks(
    svc: Svc,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "mediation_test.py").write_text(_script())
    services = svc.services
    services.settings = msgspec.structs.replace(
        services.settings,
        applovin_event_keys=KEYS["applovin"],
        levelplay_private_keys=KEYS["levelplay"],
    )
    key = svc.account.live_key
    async with svc.client() as client:
        query = _query(tmp_path, "applovin", await _intent(client, key), "evt-0001")
        answer = await client.get(f"/v1/spotlights/applovin?{query}")
        assert answer.json()["rewarded"] is True, answer.text
        again = await client.get(f"/v1/spotlights/applovin?{query}")
        assert again.json()["reason"] == "duplicate"
        query = _query(tmp_path, "levelplay", await _intent(client, key), "evt-0002")
        for _ in range(2):  # the second a duplicate, acknowledged the same
            answer = await client.get(f"/v1/spotlights/levelplay?{query}")
            assert (answer.status_code, answer.text) == (200, "evt-0002:OK")
        assert await _earned(client, key) == 10_000
