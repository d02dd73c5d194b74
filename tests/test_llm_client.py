"""The LLM clients over real HTTP against the scripted server, and JSON repair as plain unit tests."""

from __future__ import annotations

import asyncio

import pytest

from conftest import DEADLINE_S, wait_for
from llm_fixtures import fake  # noqa: F401
from stbme.llm.answer_schemas import ANSWER_SCHEMAS
from stbme.llm.base import LLMError, complete_json
from stbme.llm.jsonrepair import JSONRepairError, TruncatedJSON, parse_json
from stbme.llm.openai import OpenAIChat
from stbme.llm.usage import UsageMeter

MESSAGES = [{"role": "system", "content": "[stbme:summary]\nSummarise."}, {"role": "user", "content": "#1 hi"}]


# -- JSON repair ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": [1, 2,],}\n```', {"a": [1, 2]}),
    ('Sure! Here it is: {"a": "x"} Hope that helps.', {"a": "x"}),
    ('<think>{"wrong": true}</think>{"right": true}', {"right": True}),
    ('{"a": True, "b": None, // note\n "c": "x, }"}', {"a": True, "b": None, "c": "x, }"}),
    ('{"summary": "line one\nline two"}', {"summary": "line one\nline two"}),
    ('[{"op": "create"}, {"op": "delete"},]', [{"op": "create"}, {"op": "delete"}]),
    ('\u201csummary\u201d: 1', None),
])
def test_parse_json_repairs(text, expected):
    if expected is None:
        with pytest.raises(JSONRepairError):
            parse_json(text)
    else:
        assert parse_json(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "{broken: [", "42"])
def test_parse_json_refuses_garbage(text):
    with pytest.raises(JSONRepairError):
        parse_json(text)


@pytest.mark.parametrize("text", [
    '{"summary": "su',                                                   # cut inside a string
    '{"operations": [{"op": "create", "fields": {"name": "Elena"',        # cut between brackets
    'Example: {"a": 1}. Answer: {"operations": [{"op": "create"}, {"op"',  # a complete value before the cut one
    '```json\n{"synopsis": "syn',
])
def test_cut_off_json_is_never_repaired(text):
    """Closing what an answer left open would keep half an answer as if it were whole (issue 9)."""
    with pytest.raises(TruncatedJSON):
        parse_json(text)


# -- the OpenAI-compatible client -------------------------------------------------------------------
def client(fake, **kw) -> OpenAIChat:
    return OpenAIChat(fake.url, "fake-model", "sk-test", timeout_s=kw.pop("timeout_s", DEADLINE_S), backoff_s=0.01, **kw)


async def test_json_mode_is_requested_and_usage_counted(fake):
    llm = client(fake)
    value, usage = await complete_json(llm, MESSAGES, task="summary")
    await llm.close()
    body = fake.calls[0]["body"]
    assert body["response_format"] == {"type": "json_object"} and body["model"] == "fake-model"  # no schema given
    assert value["summary"].startswith("summary ")
    assert usage.calls == 1 and usage.prompt_tokens > 5 and usage.completion_tokens > 3
    snap = llm.usage.snapshot()
    assert snap["tasks"]["summary"]["calls"] == 1 and snap["total"]["prompt_tokens"] == usage.prompt_tokens


async def test_the_answer_schema_is_requested_as_structured_output(fake):
    """A small local model told the shape in words answers JSON of its own design (issue 20 item 9): the
    schema goes as OpenAI's json_schema response_format, which llama.cpp, Ollama and vLLM turn into a grammar."""
    llm = client(fake)
    value, _ = await complete_json(llm, MESSAGES, task="summary", schema=ANSWER_SCHEMAS["summary"])
    await llm.close()
    fmt = fake.calls[0]["body"]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "stbme_summary"
    assert fmt["json_schema"]["schema"] == ANSWER_SCHEMAS["summary"] and value["summary"]


async def test_a_rejected_answer_format_steps_down_to_the_next(fake):
    fake.reject_json_schema = True
    llm = client(fake, retries=0)
    first, _ = await complete_json(llm, MESSAGES, task="summary", schema=ANSWER_SCHEMAS["summary"])
    second, _ = await complete_json(llm, MESSAGES, task="summary", schema=ANSWER_SCHEMAS["summary"])
    fake.reject_json_mode = True
    third, _ = await complete_json(llm, MESSAGES, task="summary", schema=ANSWER_SCHEMAS["summary"])
    await llm.close()
    assert first["summary"] and second == first == third
    formats = [fmt and (fmt["type"] + ("+schema" if "schema" in fmt else "")) for fmt in
               (c["body"].get("response_format") for c in fake.calls)]
    # json_schema refused once (as llama-cpp-python's server does), then the schema beside JSON mode, which
    # that server turns into a grammar; when JSON mode is refused too: without the schema, then plain text
    assert formats == ["json_schema", "json_object+schema", "json_object+schema",
                       "json_object+schema", "json_object", None]
    assert fake.calls[1]["body"]["response_format"]["schema"] == ANSWER_SCHEMAS["summary"]


async def test_the_fake_catches_an_answer_outside_the_schema(fake):
    """The fixture fails every LLM test whose scripted answers a model held to the sent schema could not
    write; this is that check failing on purpose."""
    llm = client(fake)
    narrow = {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 5}}}
    await complete_json(llm, MESSAGES, task="summary", schema=narrow)
    await llm.close()
    assert len(fake.schema_violations) == 1 and "too long" in fake.schema_violations[0]
    fake.schema_violations.clear()


async def test_json_mode_rejection_falls_back(fake):
    fake.reject_json_mode = True
    llm = client(fake, retries=0)
    value, _ = await complete_json(llm, MESSAGES, task="summary")
    value2, _ = await complete_json(llm, MESSAGES, task="summary")
    await llm.close()
    assert value["summary"] and value2 == value
    assert ["response_format" in c["body"] for c in fake.calls] == [True, False, False]  # remembered


async def test_fenced_answers_with_trailing_commas_are_repaired(fake):
    fake.fenced = True
    llm = client(fake)
    value, _ = await complete_json(llm, MESSAGES, task="summary")
    await llm.close()
    assert value["summary"] and len(fake.calls) == 1


async def test_500_is_retried_then_succeeds(fake):
    fake.statuses = [500, 502]
    llm = client(fake, retries=2)
    value, _ = await complete_json(llm, MESSAGES, task="summary")
    await llm.close()
    assert value["summary"] and len(fake.calls) == 3


async def test_429_backs_off_and_gives_up_with_a_clear_error(fake):
    fake.statuses = [429] * 5
    llm = client(fake, retries=2)
    with pytest.raises(LLMError, match=r"failed after 3 attempts: HTTP 429"):
        await llm.complete(MESSAGES, task="summary")
    await llm.close()
    assert len(fake.calls) == 3 and llm.usage.snapshot()["tasks"]["summary"]["failures"] == 1


async def test_a_client_closed_while_it_answers_finishes_the_call_and_leaves_nothing_open(fake):
    """An llm.* change swaps the client while a batch's call is in flight (the real-model run's "Unclosed
    client session"): closing the old client aborted that call, which was asked again on a new session that
    nothing closed."""
    llm = client(fake)
    answer_now = asyncio.Event()

    async def hold(task):
        await answer_now.wait()
    fake.before_answer = hold
    call = asyncio.create_task(llm.complete(MESSAGES, task="summary"))
    await wait_for(lambda: fake.calls, "the call to reach the fake")
    await llm.close()
    answer_now.set()
    assert (await call).text and len(fake.calls) == 1      # finished on its connection, not asked again
    assert llm.http._session.closed                        # by the last call out
    fake.before_answer = None
    await llm.complete(MESSAGES, task="summary")           # a batch still holding the old client
    assert len(fake.calls) == 2 and llm.http._session.closed


async def test_hang_times_out(fake):
    fake.hang = True
    llm = client(fake, retries=1, timeout_s=0.3)
    # Both attempts timed out: the message counts them. (How many reached the fake within 0.3 s depends on
    # the machine's load, so the fake's count is not asserted.)
    with pytest.raises(LLMError, match=r"failed after 2 attempts: no answer within 0.3 s \(llm.timeout_s\)"):
        await llm.complete(MESSAGES, task="summary")
    await llm.close()


async def test_auth_error_is_not_retried_and_says_what_to_check(fake):
    fake.statuses = [401]
    llm = client(fake, retries=3)
    with pytest.raises(LLMError, match="HTTP 401.*check llm.key"):
        await llm.complete(MESSAGES, task="summary")
    await llm.close()
    assert len(fake.calls) == 1


async def test_garbage_is_retried_with_the_bad_answer_then_fails(fake):
    fake.garbage = 5
    llm = client(fake)
    with pytest.raises(LLMError, match="was not JSON after 2 attempts"):
        await complete_json(llm, MESSAGES, task="summary", retries=1)
    await llm.close()
    retry = fake.calls[1]["body"]["messages"]
    assert retry[:2] == MESSAGES and retry[2]["role"] == "assistant" and "{operations" in retry[2]["content"]
    assert "ONLY the JSON object" in retry[3]["content"]


@pytest.mark.parametrize("chunked", [True, False])
async def test_an_answer_past_what_max_tokens_allows_fails_without_being_read(fake, chunked):
    from stbme.llm.base import LLMAnswerError, answer_byte_limit

    fake.huge_bytes, fake.huge_chunked = answer_byte_limit(300) * 3, chunked
    llm = client(fake, retries=2)
    with pytest.raises(LLMAnswerError, match="larger than this request can need"):
        await llm.complete(MESSAGES, task="summary", max_tokens=300)
    await llm.close()
    assert len(fake.calls) == 1  # not retried: the server is at fault, not the network
    assert fake.huge_sent < fake.huge_bytes  # the sidecar stopped reading
    fake.huge_bytes = answer_byte_limit(300) // 2  # large, but within what 300 tokens can need
    llm = client(fake)
    result = await llm.complete(MESSAGES, task="summary", max_tokens=300)
    await llm.close()
    assert len(result.text) == fake.huge_bytes


async def test_long_answers_are_counted_and_repaired_off_the_event_loop(fake, monkeypatch):
    import threading

    import stbme.llm.base as base
    import stbme.llm.openai as openai_client

    threads = []

    def recording(fn):
        def wrapper(*args, **kwargs):
            threads.append((fn.__name__, threading.current_thread() is threading.main_thread()))
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(base, "parse_json", recording(base.parse_json))
    monkeypatch.setattr(openai_client, "measure", recording(openai_client.measure))
    fake.overrides["summary"] = {"summary": "a long summary " * 4000}
    llm = client(fake)
    value, _ = await complete_json(llm, MESSAGES, task="summary")
    await llm.close()
    assert value["summary"].startswith("a long summary")
    assert threads == [("measure", False), ("parse_json", False)]


async def test_unreachable_server(fake):
    llm = OpenAIChat("http://127.0.0.1:9/v1", "m", retries=0, timeout_s=1, usage=UsageMeter())
    with pytest.raises(LLMError, match="failed after 1 attempts: Client"):
        await llm.complete(MESSAGES, task="summary")
    await llm.close()


def test_empty_url_names_the_setting():
    with pytest.raises(LLMError, match="llm.url is empty") as info:
        OpenAIChat("", "m")
    assert info.value.field == "llm.url"


async def test_settings_refuse_an_unusable_llm(client):
    resp = await client.put("/v1/settings", json={"settings": {"llm.mode": "openai"}})
    body = await resp.json()
    assert resp.status == 400 and body["field"] == "llm.url" and "llm.url is empty" in body["error"]
    resp = await client.get("/v1/settings")
    assert (await resp.json())["settings"]["llm.mode"] == "none"  # nothing saved


async def test_health_shows_llm_usage(client, fake):
    resp = await client.put("/v1/settings", json={"settings": {"llm.mode": "openai", "llm.url": fake.url}})
    assert resp.status == 200
    health = await (await client.get("/health")).json()
    assert health["llm"]["mode"] == "openai" and health["llm"]["usage"]["total"]["calls"] == 0
