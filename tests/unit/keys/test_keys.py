from app.keys import format as keys


def test_generated_keys_parse_back() -> None:
    for env in ("live", "test"):
        secret = keys.generate_key(env)
        assert secret.startswith(f"svc_{env}_")
        assert len(secret) == keys.KEY_LEN == len("svc_live_") + 50
        parsed = keys.parse_key(secret)
        assert parsed is not None
        assert parsed.environment == env
        assert secret[len("svc_live_") :].startswith(parsed.kid)


def test_checksum_catches_any_single_change() -> None:
    secret = keys.generate_key("live")
    for i in range(len("svc_live_"), len(secret)):
        c = "A" if secret[i] != "A" else "B"
        assert keys.parse_key(secret[:i] + c + secret[i + 1 :]) is None


def test_malformed_keys_are_rejected() -> None:
    good = keys.generate_key("live")
    for bad in [
        "",
        "svc_live_",
        good[:-1],
        good + "x",
        "svc_prod_" + good[9:],
        good.replace("svc_live_", "svc-live-"),
        good[:20] + "!" + good[21:],
    ]:
        assert keys.parse_key(bad) is None


def test_digest_depends_on_pepper_and_secret() -> None:
    secret = keys.generate_key("live")
    assert keys.digest(b"a", secret) == keys.digest(b"a", secret)
    assert keys.digest(b"a", secret) != keys.digest(b"b", secret)
    assert secret not in keys.digest(b"a", secret)


def test_argon2_hash_verifies_only_its_secret() -> None:
    secret = keys.generate_key("test")
    hashed = keys.hash_secret(secret)
    assert hashed.startswith("$argon2id$")
    assert secret not in hashed
    assert keys.verify_secret(hashed, secret)
    assert not keys.verify_secret(hashed, keys.generate_key("test"))
    assert not keys.verify_secret("garbage", secret)


def test_public_ids_round_trip() -> None:
    kid = keys.new_kid()
    assert keys.kid_from_public_id(keys.public_id(kid)) == kid
    assert keys.kid_from_public_id("key_short") is None
    assert keys.kid_from_public_id(kid) is None


def test_bearer_parsing() -> None:
    assert keys.bearer_secret("Bearer abc") == "abc"
    assert keys.bearer_secret("bearer  abc ") == "abc"
    assert keys.bearer_secret("Basic abc") is None
    assert keys.bearer_secret("Bearer ") is None
    assert keys.bearer_secret(None) is None
