"""End-to-end structured output: the official openai SDK asks the real demo model (SmolLM2,
draft mode) for `response_format` JSON; the reply must parse and match the schema. The schema
is checked here keyword by keyword (the keywords it uses)."""

import json

import openai
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "bright": {"type": "boolean"},
        "name": {"type": "string", "maxLength": 12},
    },
    "required": ["color", "count", "bright", "name"],
    "additionalProperties": False,
}


def _matches(v):
    assert set(v) == set(SCHEMA["required"])
    assert v["color"] in ("red", "green", "blue")
    assert isinstance(v["count"], int) and not isinstance(v["count"], bool) and 1 <= v["count"] <= 9
    assert isinstance(v["bright"], bool)
    assert isinstance(v["name"], str) and len(v["name"]) <= 12


@pytest.mark.parametrize("seed", [None, 3])
def test_json_schema_reply_parses_and_matches(real_server, seed):
    extra = {} if seed is None else {"seed": seed, "temperature": 0.9}
    r = real_server.client().chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "Describe a paint as JSON."}],
        max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "paint", "schema": SCHEMA, "strict": True}},
        **extra,
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    _matches(json.loads(r.choices[0].message.content))


def test_json_object_stream(real_server):
    chunks = list(real_server.client().chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "Give me a JSON object with one key, name, and a one-word value."}],
        max_tokens=200,
        response_format={"type": "json_object"},
        stream=True,
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finish == ["stop"], text
    assert isinstance(json.loads(text), dict)


def test_refused_schema_is_400_naming_response_format(real_server):
    with pytest.raises(openai.BadRequestError) as e:
        real_server.client().chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}},
        )
    assert e.value.body["param"] == "response_format"


def test_tool_choice_required_forces_a_valid_call(real_server):
    tools = [{"type": "function", "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False}}},
             {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
    c = real_server.client()
    for choice, names in [("required", {"get_weather", "get_time"}),
                          ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"})]:
        r = c.chat.completions.create(model="demo", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                      tools=tools, tool_choice=choice, max_tokens=80)
        calls = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0].message.content
        assert len(calls) == 1 and calls[0].function.name in names
        args = json.loads(calls[0].function.arguments)
        if calls[0].function.name == "get_weather":
            assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 20
