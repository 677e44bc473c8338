"""End-to-end through the official openai SDK and a real loopback port, with the scripted
engine behind `dspark serve --scripted` (no model): proves tool-call and reasoning parsing
and the tool round trip on the wire, not model quality."""

import json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_tool_round_trip_sdk_scripted_engine(scripted_server):
    c = scripted_server.client()
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    msgs.append(choice.message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 22})})
    r = c.chat.completions.create(model="x", messages=msgs, tools=TOOLS)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == "It is 22 C and sunny in Paris."


def test_tool_call_streamed_as_one_complete_delta_sdk_scripted_engine(scripted_server):
    c = scripted_server.client()
    msgs = [{"role": "user", "content": "weather in Paris?"}]
    chunks = list(c.chat.completions.create(model="x", messages=msgs, tools=TOOLS, stream=True))
    calls = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1
    assert calls[0].index == 0 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == "Let me look that up."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_reasoning_content_never_in_content_sdk_scripted_engine(scripted_server):
    c = scripted_server.client()
    msgs = [{"role": "user", "content": "think hard: pick a number"}]
    m = c.chat.completions.create(model="x", messages=msgs).choices[0].message
    assert m.content == "42"
    assert m.model_extra["reasoning_content"] == "The user wants a number."
    chunks = list(c.chat.completions.create(model="x", messages=msgs, stream=True))
    reasoning = "".join((ch.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for ch in chunks)
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert (reasoning, content) == ("The user wants a number.", "42")
