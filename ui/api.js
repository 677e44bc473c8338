// dspark UI transport: `window.__TAURI__ ? ipc : http`.
// Inside the desktop app every call goes through Tauri commands and events (no fetch to
// localhost: WKWebView may block it); in a browser the same calls are HTTP to the server that
// served this page. Both transports expose the same methods; app-only ones are absent in http.
'use strict';

window.DS = window.DS || {};

(function (DS) {
  // ---------- error text: never show raw JSON ----------
  function errorText(status, body) {
    let msg = null;
    let type = null;
    if (body && typeof body === 'object' && body.error) {
      msg = typeof body.error === 'string' ? body.error : body.error.message;
      type = body.error.type;
    } else if (typeof body === 'string' && body.trim()) {
      try { return errorText(status, JSON.parse(body)); } catch (_) { msg = body.trim(); }
    }
    if (status === 401 || type === 'authentication_error') {
      return 'The server needs an API key. Enter it under Settings → API key.' + (msg ? ' (' + msg + ')' : '');
    }
    if (status === 429) return 'The server is busy (its queue is full). Try again in a moment.';
    if (status === 0) return msg || 'Cannot reach the dspark server. Is it running?';
    if (!msg) return 'The server answered with HTTP status ' + status + '.';
    return msg.charAt(0).toUpperCase() + msg.slice(1);
  }

  class ApiError extends Error {
    constructor(status, body) { super(errorText(status, body)); this.status = status; }
  }

  // Splits an SSE byte stream into `data:` payloads.
  function sseParser(onData) {
    let buf = '';
    return function (text, flush) {
      buf += text;
      let i;
      while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
        const data = block.split(/\r?\n/).filter(l => l.startsWith('data:'))
          .map(l => l.slice(5).replace(/^ /, '')).join('\n');
        if (data) onData(data);
      }
      if (flush && buf.trim()) { onData(buf.replace(/^data: ?/, '')); buf = ''; }
    };
  }

  // ---------- browser mode: HTTP to the serving origin ----------
  function httpApi() {
    const base = location.origin;
    const key = () => (DS.settings && DS.settings.api_key) || '';
    const headers = (json) => {
      const h = {};
      if (json) h['Content-Type'] = 'application/json';
      if (key()) h['Authorization'] = 'Bearer ' + key();
      return h;
    };
    async function request(method, path, body) {
      let r;
      try {
        r = await fetch(base + path, { method, headers: headers(body !== undefined),
          body: body === undefined ? undefined : JSON.stringify(body) });
      } catch (e) {
        throw new ApiError(0, 'Cannot reach the dspark server at ' + base + '.');
      }
      const text = await r.text();
      let parsed = text;
      try { parsed = JSON.parse(text); } catch (_) { /* not JSON */ }
      if (!r.ok) throw new ApiError(r.status, parsed);
      return parsed;
    }
    return {
      kind: 'http',
      baseUrl: () => base + '/v1',
      get: (path) => request('GET', path),
      // Streams a chat completion; onChunk gets each parsed chunk. Resolves when done,
      // rejects with ApiError; `signal` aborts (the server then cancels the generation).
      async chat(body, onChunk, signal) {
        let r;
        try {
          r = await fetch(base + '/v1/chat/completions', { method: 'POST', headers: headers(true),
            body: JSON.stringify(Object.assign({}, body, { stream: true })), signal });
        } catch (e) {
          if (e.name === 'AbortError') throw e;
          throw new ApiError(0, 'Cannot reach the dspark server at ' + base + '.');
        }
        if (!r.ok) {
          const t = await r.text();
          throw new ApiError(r.status, t);
        }
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let err = null;
        let sawDone;
        const done = new Promise((r) => { sawDone = r; });
        const feed = sseParser((d) => {
          if (d === '[DONE]') { sawDone(); return; }
          const obj = JSON.parse(d);
          if (obj.error) err = new ApiError(200, obj);
          else onChunk(obj);
        });
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          feed(dec.decode(value, { stream: true }), false);
        }
        feed('', true);
        if (err) throw err;
      },
      // Settings live in localStorage in the browser.
      async loadSettings() {
        try { return JSON.parse(localStorage.getItem('dspark.settings') || '{}'); } catch (_) { return {}; }
      },
      async saveSettings(s) {
        localStorage.setItem('dspark.settings', JSON.stringify(s));
        return { where: 'this browser (localStorage)' };
      },
      onLive: null,
    };
  }

  // ---------- app mode: Tauri commands and events ----------
  function ipcApi() {
    const T = window.__TAURI__;
    const invoke = T.core.invoke;
    let nextId = 1;
    async function call(cmd, args) {
      try {
        return await invoke(cmd, args || {});
      } catch (e) {
        // commands reject with {status, body} (proxied API errors) or a plain message
        if (e && typeof e === 'object' && 'status' in e) throw new ApiError(e.status, e.body);
        throw new ApiError(-1, String(e && e.message ? e.message : e));
      }
    }
    return {
      kind: 'ipc',
      baseUrl: () => DS.appInfo && DS.appInfo.url ? DS.appInfo.url + '/v1' : '(server stopped)',
      get: (path) => call('api_get', { path }),
      async chat(body, onChunk, signal) {
        const id = (Date.now() % 1000000000) + nextId++;
        let err = null;
        const ch = new T.core.Channel();
        // the command forwards the router's SSE text, cut on event boundaries
        let sawDone;
        const done = new Promise((r) => { sawDone = r; });
        const feed = sseParser((d) => {
          if (d === '[DONE]') { sawDone(); return; }
          const obj = JSON.parse(d);
          if (obj.error) err = new ApiError(200, obj);
          else onChunk(obj);
        });
        ch.onmessage = (piece) => feed(piece, false);
        const onAbort = () => { invoke('chat_cancel', { id }).catch(() => {}); };
        if (signal) signal.addEventListener('abort', onAbort, { once: true });
        try {
          await call('chat', { id, body: Object.assign({}, body, { stream: true }), onEvent: ch });
        } finally {
          if (signal) signal.removeEventListener('abort', onAbort);
        }
        // channel messages may still be in flight when the command returns
        if (!(signal && signal.aborted)) {
          await Promise.race([done, new Promise((r) => setTimeout(r, 3000))]);
        }
        feed('', true);
        if (signal && signal.aborted) {
          const e = new Error('stopped'); e.name = 'AbortError'; throw e;
        }
        if (err) throw err;
      },
      loadSettings: () => call('settings_get'),
      saveSettings: (s) => call('settings_save', { settings: s }),
      info: () => call('app_info'),
      registry: () => call('registry'),
      resolveDrafter: (model, mode) => call('resolve_drafter', { model, mode }),
      load: (req) => call('load_model', { req }),
      cancelLoad: () => call('cancel_load'),
      unload: () => call('unload_model'),
      serverStart: () => call('server_start'),
      serverStop: () => call('server_stop'),
      pull(repo, onProgress) {
        const ch = new T.core.Channel();
        ch.onmessage = onProgress;
        return call('pull', { repo, onProgress: ch });
      },
      // pushes: live gauges ('live'), server state ('server'), download progress of a load
      // ('load-progress'), tab requests from the tray ('navigate')
      listen: (name, fn) => T.event.listen(name, (e) => fn(e.payload)),
    };
  }

  DS.ApiError = ApiError;
  DS.errorText = errorText;
  DS.sseParser = sseParser;
  DS.api = window.__TAURI__ ? ipcApi() : httpApi();
})(window.DS);
