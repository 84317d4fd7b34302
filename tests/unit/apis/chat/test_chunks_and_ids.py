import json

import pytest

from app.apis.chat.chunks import DONE, ChunkEncoder, chunk_usage, error_event
from app.core.ids import CompletionIds, hex_ids


def test_content_chunks() -> None:
    enc = ChunkEncoder(42, 1_700_000_000, "svc-fast")
    first = json.loads(enc.content('He said "hi"\n', first=True, last=False)[6:])
    assert first == {
        "id": "chatcmpl-svc-42",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "svc-fast",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": 'He said "hi"\n'},
                "finish_reason": None,
            }
        ],
    }
    last = json.loads(enc.content("end", first=False, last=True)[6:])
    assert last["choices"] == [{"index": 0, "delta": {"content": "end"}, "finish_reason": "stop"}]
    raw = enc.content("x", first=False, last=False)
    assert raw.startswith(b"data: ")
    assert raw.endswith(b"\n\n")
    assert raw.count(b"\n") == 2


def test_metadata_chunk_has_exactly_three_fields() -> None:
    enc = ChunkEncoder(7, 1, "svc-code")
    meta = json.loads(enc.metadata("svc-auto", 12, 988, chunk_usage(5, 2, None))[6:])
    assert meta["choices"] == []
    assert meta["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert meta["svc"] == {
        "requested_model": "svc-auto",
        "credits_used": 12,
        "balance_remaining": 988,
    }
    assert meta["model"] == "svc-code"
    assert DONE == b"data: [DONE]\n\n"


def test_error_event_shape() -> None:
    body = json.loads(error_event("m", "upstream_error", "upstream_unavailable")[6:])
    assert body == {
        "error": {
            "message": "m",
            "type": "upstream_error",
            "param": None,
            "code": "upstream_unavailable",
        }
    }


def test_completion_ids_are_unique_and_63_bit() -> None:
    ids = CompletionIds()
    seen = [ids.next() for _ in range(20_000)]
    assert len(set(seen)) == len(seen)
    assert all(0 < n < 2**63 for n in seen)
    assert seen == sorted(seen)


def test_the_documented_chunk_type_matches_the_encoder() -> None:
    """``ChatCompletionChunk`` (the OpenAPI stream schema) decodes every chunk the encoder
    writes, and refuses a field the encoder never writes."""
    import msgspec

    from app.apis.chat.chunks import ChatCompletionChunk

    enc = ChunkEncoder(9, 1_700_000_000, "svc-smart")
    decode = msgspec.json.Decoder(ChatCompletionChunk).decode
    first = decode(enc.content("a", first=True, last=False)[6:])
    assert (first.choices[0].delta.role, first.choices[0].finish_reason) == ("assistant", None)
    last = decode(enc.content("b", first=False, last=True)[6:])
    assert last.choices[0].delta.role is msgspec.UNSET
    assert last.choices[0].finish_reason == "stop"
    meta = decode(enc.metadata("svc-auto", 3, 7, chunk_usage(4, 1, None))[6:])
    assert meta.choices == []
    assert meta.svc is not msgspec.UNSET
    assert meta.svc.credits_used == 3
    extra = enc.content("c", first=False, last=False)[6:].replace(b'"created"', b'"x":1,"created"')
    with pytest.raises(msgspec.ValidationError):
        decode(extra)


def test_hex_ids_are_drawn_together_and_differ() -> None:
    ids = hex_ids("resp_svc_", "msg_", random_bytes=12)
    assert [i.rsplit("_", 1)[0] for i in ids] == ["resp_svc", "msg"]
    assert all(len(i.rsplit("_", 1)[1]) == 24 for i in ids)
    assert ids[0][-24:] != ids[1][-24:]
    assert len({hex_ids("a_", random_bytes=12)[0] for _ in range(1000)}) == 1000
