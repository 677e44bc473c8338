// dspark UI: gauges, model manager, settings and endpoint panels.
'use strict';

(function (DS) {
  const $ = (id) => document.getElementById(id);
  const ARC = 157.1; // length of the gauge arc path

  function setGauge(id, value, max, text) {
    const g = $(id);
    const f = Math.max(0, Math.min(1, max > 0 ? value / max : 0));
    g.querySelector('.fill').style.strokeDashoffset = String(ARC * (1 - f));
    g.querySelector('.value').textContent = text;
  }

  // ---------- gauges ----------
  const gauges = {
    busy: false,
    tpsMax: 50,
    live(s) {
      if (!s) return;
      if (s.rounds > 0 || s.generations > 0) {
        setGauge('g-accept', s.accept_len, 8, s.accept_len.toFixed(2));
        gauges.tpsMax = Math.max(gauges.tpsMax, Math.ceil(s.tokens_per_sec / 25) * 25);
        setGauge('g-tps', s.tokens_per_sec, gauges.tpsMax, s.tokens_per_sec.toFixed(1));
      }
      $('s-rounds').textContent = s.rounds + ' (' + s.tokens + ' tokens)';
      gauges.histogram(s.histogram || []);
    },
    histogram(h) {
      const box = $('histogram');
      const max = Math.max(1, ...h);
      if (box.children.length !== h.length) {
        box.textContent = '';
        const labels = $('histogram-labels') || document.createElement('div');
        labels.id = 'histogram-labels';
        labels.textContent = '';
        h.forEach((_, i) => {
          const b = document.createElement('div');
          b.className = 'bar';
          box.appendChild(b);
          const l = document.createElement('span');
          l.textContent = i === h.length - 1 ? (i + 1) + '+' : String(i + 1);
          labels.appendChild(l);
        });
        box.after(labels);
      }
      h.forEach((n, i) => {
        const b = box.children[i];
        b.style.height = (100 * n / max) + '%';
        b.title = n + ' rounds committed ' + (i + 1) + (i === h.length - 1 ? '+' : '') + ' tokens';
      });
    },
    metrics(m) {
      if (!m || typeof m !== 'object') return;
      $('s-requests').textContent = String(m.requests);
      const pct = m.prompt_tokens > 0 ? Math.round(100 * m.cached_tokens / m.prompt_tokens) : 0;
      $('s-cache').textContent = m.cached_tokens + ' of ' + m.prompt_tokens + ' prompt tokens (' + pct + '%)';
      $('s-mean-accept').textContent = m.mean_accept_len ? m.mean_accept_len.toFixed(2) : '–';
    },
    lastReply(x) {
      $('s-split').textContent = Math.round(x.draft_ms) + ' / ' + Math.round(x.verify_ms) + ' ms';
      setGauge('g-accept', x.accept_len, 8, Number(x.accept_len).toFixed(2));
      setGauge('g-tps', x.tokens_per_sec, gauges.tpsMax, Number(x.tokens_per_sec).toFixed(1));
    },
    generating(on) { gauges.busy = on; DS.refreshSoon && DS.refreshSoon(); },
  };

  // ---------- model manager ----------
  function showModel(m) {
    const box = $('current-model');
    box.textContent = '';
    if (!m) { box.textContent = 'No model loaded.'; return; }
    // the load form starts from what is served until the user edits it
    const sel = $('load-mode');
    if (!sel.dataset.touched && [...sel.options].some((o) => o.value === m.mode)) sel.value = m.mode;
    const rows = [['Model', m.id], ['Mode', m.mode], ['Target', m.target], ['Drafter', m.drafter || '(none)'],
      ['Context', m.context_length ? m.context_length + ' tokens' : '–']];
    const dl = document.createElement('dl');
    dl.id = 'model-facts';
    dl.style.cssText = 'display:grid;grid-template-columns:auto 1fr;gap:2px 12px;margin:0';
    rows.forEach(([k, v]) => {
      const dt = document.createElement('dt'); dt.textContent = k;
      const dd = document.createElement('dd'); dd.textContent = v; dd.style.margin = '0';
      dl.append(dt, dd);
    });
    box.appendChild(dl);
  }

  function fmtBytes(n) {
    if (!n) return '–';
    const u = ['B', 'KB', 'MB', 'GB', 'TB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i > 1 ? 1 : 0) + ' ' + u[i];
  }

  async function loadRegistry() {
    if (!DS.api.registry) return;
    const tbody = document.querySelector('#registry tbody');
    const list = await DS.api.registry();
    tbody.textContent = '';
    list.forEach((e) => {
      const tr = document.createElement('tr');
      const cell = (t, code) => {
        const td = document.createElement('td');
        if (code && t) { const c = document.createElement('code'); c.textContent = t; td.appendChild(c); } else td.textContent = t || '—';
        tr.appendChild(td);
      };
      cell(e.id + (e.on_disk ? ' ✓' : ''));
      cell(fmtBytes(e.ram_bytes));
      cell(e.dspark, true); cell(e.dflash, true); cell(e.draft, true);
      const td = document.createElement('td');
      const use = document.createElement('button');
      use.textContent = 'Use';
      use.addEventListener('click', () => { $('load-model').value = e.id; resolveDrafter(); });
      if (e.unavailable) {
        // the engine cannot run it yet: say why instead of offering it
        use.disabled = true;
        use.title = e.unavailable;
        tr.title = e.unavailable;
        tr.classList.add('unavailable');
      }
      td.appendChild(use);
      tr.appendChild(td);
      tbody.appendChild(tr);
    });
  }

  async function resolveDrafter() {
    if (!DS.api.resolveDrafter) return;
    const out = $('drafter-resolution');
    const mode = $('load-mode').value;
    if ($('load-drafter').value.trim()) { out.textContent = 'Drafter: as given.'; return; }
    try {
      const r = await DS.api.resolveDrafter($('load-model').value.trim(), mode);
      out.textContent = 'Resolves to target ' + r.target + (r.drafter ? ', drafter ' + r.drafter : ', no drafter');
    } catch (e) {
      out.textContent = e.message;
    }
  }

  function initModels() {
    const app = DS.api.kind === 'ipc';
    $('models-app-only').hidden = app;
    $('models-controls').hidden = !app;
    if (!app) return;
    $('load-mode').addEventListener('change', () => { $('load-mode').dataset.touched = '1'; resolveDrafter(); });
    $('load-model').addEventListener('change', resolveDrafter);
    $('load-drafter').addEventListener('change', resolveDrafter);
    $('load-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      const btn = $('load-btn');
      const cancel = $('cancel-load-btn');
      btn.disabled = true;
      btn.textContent = 'Loading…';
      if (DS.api.cancelLoad) cancel.hidden = false;
      try {
        const md = parseInt($('load-max-draft').value, 10);
        await DS.api.load({ model: $('load-model').value.trim() || 'demo', mode: $('load-mode').value,
          drafter: $('load-drafter').value.trim() || null, max_draft: md > 0 ? md : null });
        await DS.refresh();
      } catch (err) {
        DS.showError(err.message);
      } finally {
        btn.disabled = false;
        btn.textContent = 'Load';
        cancel.hidden = true;
      }
    });
    $('cancel-load-btn').addEventListener('click', async () => {
      try { await DS.api.cancelLoad(); } catch (err) { DS.showError(err.message); }
    });
    $('unload-btn').addEventListener('click', async () => {
      try { await DS.api.unload(); await DS.refresh(); } catch (err) { DS.showError(err.message); }
    });
    $('pull-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      const repo = $('pull-repo').value.trim();
      if (!repo) return;
      const row = document.createElement('div');
      row.innerHTML = '<div class="label"></div><div class="progress"><div></div></div>';
      row.querySelector('.label').textContent = repo + ': starting…';
      $('downloads').appendChild(row);
      try {
        await DS.api.pull(repo, (p) => {
          const pct = p.total > 0 ? Math.min(100, 100 * p.done / p.total) : 0;
          row.querySelector('.progress > div').style.width = pct.toFixed(1) + '%';
          row.querySelector('.label').textContent = repo + ': ' + (p.file || '') + ' ' +
            fmtBytes(p.done) + ' of ' + fmtBytes(p.total) + ' (' + pct.toFixed(0) + '%)';
        });
        row.querySelector('.label').textContent = repo + ': downloaded';
        row.querySelector('.progress > div').style.width = '100%';
        loadRegistry().catch(() => {});
      } catch (err) {
        row.querySelector('.label').textContent = repo + ': ' + err.message;
      }
    });
    loadRegistry().catch((e) => DS.showError(e.message));
    resolveDrafter();
  }

  // ---------- settings ----------
  function fillSettings(s) {
    $('set-port').value = s.port || '';
    $('set-api-key').value = s.api_key || '';
    $('set-thinking').checked = !!s.thinking;
    $('set-max-draft').value = s.max_draft || '';
  }

  function initSettings(where) {
    $('settings-where').textContent = where;
    $('settings-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      const num = (id) => { const n = parseInt($(id).value, 10); return Number.isFinite(n) ? n : null; };
      const s = Object.assign({}, DS.settings, {
        port: num('set-port'), api_key: $('set-api-key').value || null,
        thinking: $('set-thinking').checked, max_draft: num('set-max-draft'),
      });
      if (s.port !== null && (s.port < 0 || s.port > 65535)) {
        DS.showError('The port must be a number from 0 to 65535.');
        return;
      }
      try {
        const r = await DS.api.saveSettings(s);
        DS.settings = s;
        DS.chat.applyDefaults(s);
        $('settings-status').textContent = 'Saved to ' + (r && r.where ? r.where : 'settings') + '.';
        DS.renderEndpoint();
      } catch (err) {
        DS.showError(err.message);
      }
    });
  }

  // ---------- endpoint ----------
  function renderEndpoint() {
    const url = DS.api.baseUrl();
    const key = (DS.settings && DS.settings.api_key) ? 'YOUR_API_KEY' : '';
    const model = DS.currentModel ? DS.currentModel.id : 'demo';
    $('endpoint-url').textContent = url;
    $('snippet-curl').textContent =
      'curl ' + url + '/chat/completions \\\n  -H "Content-Type: application/json" \\\n' +
      (key ? '  -H "Authorization: Bearer ' + key + '" \\\n' : '') +
      '  -d \'{"model": "' + model + '", "messages": [{"role": "user", "content": "Hello"}], "stream": true}\'';
    $('snippet-python').textContent =
      'from openai import OpenAI\n\nclient = OpenAI(base_url="' + url + '", api_key="' + (key || 'unused') + '")\n' +
      'r = client.chat.completions.create(\n    model="' + model + '",\n' +
      '    messages=[{"role": "user", "content": "Hello"}],\n)\n' +
      'print(r.choices[0].message.content)\nprint(r.model_extra["x_dspark"])  # accept_len, tokens_per_sec, ...';
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch (_) { /* fall back below */ }
    const ta = document.createElement('textarea');
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
  }

  function initEndpoint() {
    document.querySelectorAll('[data-copy]').forEach((b) => {
      b.addEventListener('click', async () => {
        await copyText($(b.dataset.copy).textContent);
        const t = b.textContent;
        b.textContent = 'Copied';
        setTimeout(() => { b.textContent = t; }, 1200);
      });
    });
  }

  DS.gauges = gauges;
  DS.panels = { showModel, initModels, fillSettings, initSettings, initEndpoint, loadRegistry };
  DS.renderEndpoint = renderEndpoint;
})(window.DS);
