// dspark UI: the chat tab. Streams replies through DS.api.chat, shows reasoning_content in a
// collapsible "Thinking" block and tool calls as cards; Stop aborts the request, which makes
// the server cancel the generation.
'use strict';

(function (DS) {
  const $ = (id) => document.getElementById(id);
  const history = [];
  let controller = null;

  const EXAMPLE_TOOLS = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function scrollDown() {
    const m = $('messages');
    m.scrollTop = m.scrollHeight;
  }

  function addMessage(role, text) {
    const empty = document.querySelector('#messages .empty');
    if (empty) empty.remove();
    const box = el('div', 'msg ' + role);
    box.appendChild(el('div', 'role', role === 'user' ? 'You' : 'dspark'));
    const content = el('div', 'content', text || '');
    box.appendChild(content);
    $('messages').appendChild(box);
    scrollDown();
    return { box, content };
  }

  // A live assistant bubble: thinking block, content, tool calls, stats line.
  function assistantView() {
    const v = addMessage('assistant', '');
    v.box.classList.add('streaming');
    let thinking = null;
    let thinkingBody = null;
    const calls = [];
    return {
      box: v.box,
      reasoning(t) {
        if (!thinking) {
          thinking = el('details', 'thinking');
          thinking.open = true;
          thinking.appendChild(el('summary', null, 'Thinking…'));
          thinkingBody = el('div', 'body');
          thinking.appendChild(thinkingBody);
          v.box.insertBefore(thinking, v.content);
        }
        thinkingBody.textContent += t;
      },
      content(t) { v.content.textContent += t; },
      toolCall(tc) {
        const i = tc.index !== undefined ? tc.index : calls.length;
        let c = calls[i];
        if (!c) {
          c = { id: tc.id, type: 'function', function: { name: '', arguments: '' }, node: el('div', 'tool-call') };
          calls[i] = c;
          v.box.appendChild(c.node);
        }
        if (tc.id) c.id = tc.id;
        if (tc.function) {
          c.function.name += tc.function.name || '';
          c.function.arguments += tc.function.arguments || '';
        }
        c.node.textContent = '';
        c.node.appendChild(el('span', 'name', 'tool call → ' + c.function.name));
        let args = c.function.arguments;
        try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (_) { /* partial */ }
        c.node.appendChild(el('div', 'args', args));
      },
      finish(note) {
        v.box.classList.remove('streaming');
        if (thinking) {
          thinking.open = false;
          thinking.querySelector('summary').textContent = 'Thinking (' + thinkingBody.textContent.length + ' chars)';
        }
        if (note) v.box.appendChild(el('div', 'meta', note));
      },
      error(msg) { v.box.appendChild(el('div', 'error', msg)); },
      text: () => v.content.textContent,
      calls: () => calls.filter(Boolean).map(c => ({ id: c.id, type: 'function', function: c.function })),
    };
  }

  function statsLine(x, usage, finish) {
    if (!x) return finish ? 'finish: ' + finish : '';
    const parts = [x.mode];
    if (usage) parts.push(usage.completion_tokens + ' tokens');
    parts.push(x.tokens_per_sec + ' tok/s', 'accept ' + x.accept_len + '/round',
      x.target_forwards + ' target fwds', 'draft ' + Math.round(x.draft_ms) + ' ms',
      'verify ' + Math.round(x.verify_ms) + ' ms');
    if (finish) parts.push('finish ' + finish);
    return parts.join(' · ');
  }

  function requestBody() {
    const s = DS.settings || {};
    const msgs = [];
    const sys = $('opt-system').value.trim();
    if (sys) msgs.push({ role: 'system', content: sys });
    const body = {
      messages: msgs.concat(history),
      max_tokens: Math.max(1, parseInt($('opt-max-tokens').value, 10) || 256),
      temperature: parseFloat($('opt-temperature').value) || 0,
      enable_thinking: $('opt-thinking').checked,
      stream_options: { include_usage: true },
    };
    if ($('opt-tools-on').checked) {
      try {
        body.tools = JSON.parse($('opt-tools').value);
      } catch (e) {
        throw new Error('The tools field is not valid JSON: ' + e.message);
      }
    }
    return body;
  }

  function setBusy(busy) {
    $('send').disabled = busy;
    $('stop').disabled = !busy;
    document.body.classList.toggle('generating', busy);
  }

  async function send(text) {
    if (controller) return;
    let body;
    history.push({ role: 'user', content: text });
    addMessage('user', text);
    try {
      body = requestBody();
    } catch (e) {
      DS.showError(e.message);
      history.pop();
      return;
    }
    const view = assistantView();
    controller = new AbortController();
    setBusy(true);
    DS.gauges && DS.gauges.generating(true);
    let x = null;
    let usage = null;
    let finish = null;
    try {
      await DS.api.chat(body, (chunk) => {
        const ch = chunk.choices && chunk.choices[0];
        if (ch) {
          const d = ch.delta || {};
          if (d.reasoning_content) view.reasoning(d.reasoning_content);
          if (d.content) view.content(d.content);
          if (d.tool_calls) d.tool_calls.forEach(view.toolCall);
          if (ch.finish_reason) finish = ch.finish_reason;
        }
        if (chunk.usage) usage = chunk.usage;
        if (chunk.x_dspark) x = chunk.x_dspark;
        scrollDown();
      }, controller.signal);
      view.finish(statsLine(x, usage, finish));
      if (x) DS.gauges && DS.gauges.lastReply(x);
    } catch (e) {
      if (e.name === 'AbortError') {
        view.finish('stopped');
      } else {
        view.finish('');
        view.error(e.message);
        DS.showError(e.message);
      }
    } finally {
      const msg = { role: 'assistant', content: view.text() };
      const calls = view.calls();
      if (calls.length) msg.tool_calls = calls;
      history.push(msg);
      controller = null;
      setBusy(false);
      DS.gauges && DS.gauges.generating(false);
    }
  }

  function init() {
    $('opt-tools').value = JSON.stringify(EXAMPLE_TOOLS, null, 1);
    $('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      const t = $('prompt').value.trim();
      if (!t || controller) return;
      $('prompt').value = '';
      send(t);
    });
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey) {
        e.preventDefault();
        $('composer').requestSubmit();
      }
    });
    $('stop').addEventListener('click', () => { if (controller) controller.abort(); });
    $('clear').addEventListener('click', () => {
      if (controller) controller.abort();
      history.length = 0;
      $('messages').textContent = '';
    });
  }

  DS.chat = { init, send, applyDefaults(s) { $('opt-thinking').checked = !!s.thinking; } };
})(window.DS);
