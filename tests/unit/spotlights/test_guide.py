"""The companion-app guide's local-key script (docs/spotlights.md, "Testing with a local
key") runs as written and its signed callback rewards an intent in process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from app.spotlights.admob_keys import VerifierKeys
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)
from tests.unit.spotlights.test_rewards import _earned, _intent

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
GUIDE = Path(__file__).parents[3] / "docs" / "spotlights.md"
MARKER = "<!-- test: tests/unit/spotlights/test_guide.py runs this block -->"


def _script() -> str:
    text = GUIDE.read_text()
    after = text[text.index(MARKER) + len(MARKER) :]
    opening = after.index("```python\n") + len("```python\n")
    return after[opening : after.index("```", opening)]


def _run(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "admob_test.py", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


async def test_the_guides_local_key_script_signs_a_rewarding_callback(
    svc: Svc,  # noqa: F811
    tmp_path: Path,
) -> None:
    (tmp_path / "admob_test.py").write_text(_script())
    setting = _run(tmp_path)
    assert setting.startswith("SVC_ADMOB_KEYS_URL=file://")
    services = svc.services
    # the script's ad unit, as step 1 of the guide lists the app's own
    ad_unit = _script().split('("ad_unit", "')[1].split('"')[0]
    services.settings = msgspec.structs.replace(services.settings, admob_ad_units=ad_unit)
    await services.admob_keys.close()
    services.admob_keys = VerifierKeys(setting.partition("=")[2], services.redis, services.layout)
    key = svc.account.live_key
    async with svc.client() as client:
        query = _run(tmp_path, await _intent(client, key), "tx-0001")
        answer = await client.get(f"/v1/spotlights/admob?{query}")
        assert answer.json()["rewarded"] is True, answer.text
        again = await client.get(f"/v1/spotlights/admob?{query}")
        assert again.json()["reason"] == "duplicate"
        assert await _earned(client, key) == 5_000
    await services.admob_keys.close()
