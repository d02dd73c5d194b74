"""A model with a small context (issue 20 item 9: SmolLM2 under llama.cpp, 4096 tokens). The retry of a cut-off
answer asks for more max_tokens; past the context the server answers HTTP 400 context_length_exceeded, and the
task failed. The client now learns the context from that 400, asks again once with the room that fits, and
fits every later request in it; a cut answer is not echoed back into the retry's prompt."""

from __future__ import annotations

import pytest

from conftest import DEADLINE_S
from llm_fixtures import fake  # noqa: F401
from stbme.llm.base import LLMContextError, complete_json
from stbme.llm.openai import OpenAIChat, context_limit
from stbme.llm.usage import UsageMeter

SYSTEM = {"role": "system", "content": "[stbme:summary]\nSummarise the messages in one JSON object."}
MESSAGES = [SYSTEM, {"role": "user", "content": "#1 [user Alex]: " + "the bell tower rings at dusk " * 40}]


def client(fake, **kw) -> OpenAIChat:
    return OpenAIChat(fake.url, "fake-model", timeout_s=DEADLINE_S, backoff_s=0.01, usage=UsageMeter(), **kw)


def asked(fake) -> list[int]:
    return [c["body"]["max_tokens"] for c in fake.calls]


async def test_a_cut_answers_retry_fits_the_models_context(fake):
    fake.context_tokens = 1500      # the first request fits; its retry, with twice the room, would not
    fake.truncate = 1
    llm = client(fake, max_tokens=1000)
    value, usage = await complete_json(llm, MESSAGES, task="summary")   # before: LLMError, HTTP 400
    assert value["summary"].startswith("summary")
    assert usage.cut_off == 1
    assert asked(fake)[:2] == [1000, 2000] and fake.context_refusals == 1
    prompt = fake.prompt_tokens(fake.calls[-1]["body"])
    assert prompt + asked(fake)[-1] <= 1500                             # the answer's room fits the context
    assert llm.context_tokens == 1500 and llm.prompt_token_ratio > 1.0
    # The cut answer is not sent back (it filled the room once): the reminder rides on the user message.
    retry = fake.calls[-1]["body"]["messages"]
    assert [m["role"] for m in retry] == ["system", "user"] and "cut off" in retry[-1]["content"]

    # Learned once per client: a later long request is fitted before it is sent, no second 400.
    fake.calls.clear()
    value, _ = await complete_json(llm, MESSAGES, task="summary", max_tokens=4000)
    assert fake.context_refusals == 1 and len(fake.calls) == 1
    assert fake.prompt_tokens(fake.calls[0]["body"]) + asked(fake)[0] <= 1500
    await llm.close()


async def test_a_prompt_that_fills_the_context_fails_clearly(fake):
    fake.context_tokens = 200       # the prompt alone is longer: no max_tokens helps
    llm = client(fake)
    with pytest.raises(LLMContextError, match="leaves no room for an answer in the model's context of 200 tokens"):
        await llm.complete(MESSAGES, task="summary")
    assert fake.context_refusals == 1                                   # asked once, not retried in a loop
    await llm.close()


@pytest.mark.parametrize("body, expected", [
    # llama-cpp-python's server (what SmolLM2 ran under)
    ('{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, you requested 5296 '
     'tokens (4096 in the messages, 1200 in the completion).","code":"context_length_exceeded"}}', (4096, 4096)),
    # llama.cpp's own server
    ('{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",'
     '"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}', (4096, 5000)),
    # OpenAI's older wording
    ('{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, your messages resulted '
     'in 9000 tokens.","code":"context_length_exceeded"}}', (8192, 9000)),
    ('{"error":{"code":"context_length_exceeded","message":"too long"}}', (None, None)),
    ('{"error":{"message":"response_format json_object is not supported"}}', None),
])
def test_context_errors_are_read_from_each_servers_words(body, expected):
    assert context_limit(body) == expected
