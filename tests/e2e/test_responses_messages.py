"""End-to-end: the official `openai` SDK's Responses API (`client.responses`) and the official
`anthropic` SDK's Messages API (`client.messages`) against `dspark serve`: the real demo model
in draft mode (speculative output equal to a baseline server's greedy chat text), and the
scripted engine for tool round trips and reasoning/thinking."""

import anthropic
import openai
import pytest

from conftest import API_KEY, Server

QUESTION = "Name three colors."
# long enough that the drafter is rejected at some positions (accept_len 4.78 here, not 5)
SPEC_QUESTION = "Explain how rain forms."
SPEC_MAX = 40


@pytest.fixture(scope="module")
def baseline_server():
    s = Server(["--model", "demo", "--mode", "baseline"])
    yield s
    s.stop()


def claude(server, **kw):
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 120)
    return anthropic.Anthropic(base_url=server.base, api_key=server.api_key or "unused", **kw)


# ---- real model: SDK shapes and speculative == baseline ----

def test_spec_on_new_routes_equals_baseline_chat(real_server, baseline_server):
    convo = [{"role": "user", "content": SPEC_QUESTION}]
    base = baseline_server.client().chat.completions.create(
        model="demo", messages=convo, max_tokens=SPEC_MAX, temperature=0)
    want = base.choices[0].message.content
    assert want and base.usage.completion_tokens == SPEC_MAX
    oa = real_server.client()
    r = oa.responses.create(model="demo", input=SPEC_QUESTION, max_output_tokens=SPEC_MAX, temperature=0)
    assert r.output_text == want
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    m = claude(real_server).messages.create(model="demo", max_tokens=SPEC_MAX, messages=convo)
    assert m.content[0].text == want and m.stop_reason == "max_tokens"
    with claude(real_server).messages.stream(model="demo", max_tokens=SPEC_MAX, messages=convo) as s:
        assert "".join(s.text_stream) == want
    # usage agrees with the chat route's for the same conversation
    assert r.usage.input_tokens == base.usage.prompt_tokens
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == base.usage.prompt_tokens
    assert r.usage.output_tokens == m.usage.output_tokens == base.usage.completion_tokens
    assert r.model_extra["x_dspark"]["mode"] == "draft"
    assert m.model_extra["x_dspark"]["accept_len"] >= 1.0


def test_responses_sdk_whole_and_streamed(real_server):
    c = real_server.client()
    r = c.responses.create(model="demo", input=[{"role": "user", "content": QUESTION}],
                           instructions="Answer briefly.", max_output_tokens=12)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output_text
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 12
    assert r.usage.input_tokens_details.cached_tokens >= 0
    events = list(c.responses.create(model="demo", input=[{"role": "user", "content": QUESTION}],
                                     instructions="Answer briefly.", max_output_tokens=12, stream=True))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-1] == ("response.completed" if r.status == "completed" else "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == r.output_text
    assert events[-1].response.output_text == r.output_text
    # the SDK's stream helper accumulates the same response; it only hands one back after
    # `response.completed`, so give the reply room to end (an `incomplete` end is still checked)
    with c.responses.stream(model="demo", input=QUESTION, max_output_tokens=96) as s:
        evs = list(s)
        if evs[-1].type == "response.completed":
            assert s.get_final_response().output_text
        else:
            assert evs[-1].type == "response.incomplete" and evs[-1].response.output_text


def test_messages_sdk_whole_and_streamed(real_server):
    c = claude(real_server)
    m = c.messages.create(model="demo", max_tokens=12, system="Answer briefly.",
                          messages=[{"role": "user", "content": QUESTION}])
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert 0 < m.usage.output_tokens <= 12
    with c.messages.stream(model="demo", max_tokens=12, system="Answer briefly.",
                           messages=[{"role": "user", "content": QUESTION}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text == final.content[0].text
    assert final.stop_reason == m.stop_reason
    assert final.usage.output_tokens == m.usage.output_tokens
    raw = list(c.messages.create(model="demo", max_tokens=12, stream=True,
                                 messages=[{"role": "user", "content": QUESTION}]))
    assert [e.type for e in raw[:3]] == ["message_start", "content_block_start", "content_block_delta"]
    assert [e.type for e in raw[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    n = c.messages.count_tokens(model="demo", system="Answer briefly.",
                                messages=[{"role": "user", "content": QUESTION}])
    assert n.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)


def test_messages_sdk_errors(real_server):
    bad = anthropic.Anthropic(base_url=real_server.base, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model="demo", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(real_server).messages.create(model="demo", max_tokens=4,
                                            messages=[{"role": "tool", "content": "hi"}])
    assert e.value.body["type"] == "error"
    assert "messages[0].role" in e.value.body["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:
        real_server.client().responses.create(model="demo", input="hi", previous_response_id="resp_x")
    assert e.value.body["param"] == "previous_response_id"


# ---- scripted engine: tools and reasoning through the SDKs ----

RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Weather of a city",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def test_responses_sdk_function_call_round_trip(scripted_server):
    c = scripted_server.client()
    r = c.responses.create(model="x", input="What is the weather in Paris?", tools=RESP_TOOLS)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert calls[0].arguments == '{"city":"Paris"}'
    follow = [{"role": "user", "content": "What is the weather in Paris?"}, calls[0].model_dump(),
              {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp_c": 22}'}]
    r2 = c.responses.create(model="x", input=follow, tools=RESP_TOOLS)
    assert r2.output_text == "It is 22 C and sunny in Paris."
    events = list(c.responses.create(model="x", input="What is the weather in Paris?", tools=RESP_TOOLS,
                                     stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].name == "get_weather" and done[0].arguments == '{"city":"Paris"}'


def test_responses_sdk_reasoning_item(scripted_server):
    r = scripted_server.client().responses.create(model="x", input="think of a number",
                                                  reasoning={"effort": "low"})
    assert r.output[0].type == "reasoning"
    assert r.output[0].content[0].text == "The user wants a number."
    assert r.output_text == "42"


def test_messages_sdk_tool_use_round_trip_and_thinking(scripted_server):
    c = claude(scripted_server)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = c.messages.create(model="x", max_tokens=200, messages=ask, tools=CLAUDE_TOOLS)
    assert m.stop_reason == "tool_use"
    tu = [b for b in m.content if b.type == "tool_use"][0]
    assert tu.name == "get_weather" and tu.input == {"city": "Paris"}
    follow = ask + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id,
                                                  "content": '{"temp_c": 22}'}]}]
    m2 = c.messages.create(model="x", max_tokens=200, messages=follow, tools=CLAUDE_TOOLS)
    assert m2.content[0].text == "It is 22 C and sunny in Paris." and m2.stop_reason == "end_turn"
    with c.messages.stream(model="x", max_tokens=200, messages=ask, tools=CLAUDE_TOOLS) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}
    with c.messages.stream(model="x", max_tokens=200, thinking={"type": "enabled", "budget_tokens": 1024},
                           messages=[{"role": "user", "content": "think of a number"}]) as s:
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking == "The user wants a number."
    assert final.content[1].text == "42"
