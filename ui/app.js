// dspark UI: start-up, tabs, the error banner, and the refresh loop that feeds the header,
// the model card and the gauges (polling over HTTP in a browser; pushed events in the app).
'use strict';

(function (DS) {
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let stoppedServer = false;

  DS.showError = function (msg) {
    const b = $('error-banner');
    b.querySelector('.msg').textContent = msg;
    b.hidden = false;
  };

  function showTab(name) {
    document.querySelectorAll('#tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === name));
    document.querySelectorAll('.tab').forEach((t) => t.classList.toggle('active', t.id === 'tab-' + name));
    if (name === 'endpoint') DS.renderEndpoint();
  }

  function serverState(state, label) {
    const p = $('server-state');
    p.className = 'pill ' + state;
    p.querySelector('.label').textContent = label;
  }

  // Pulls models, metrics and live stats; tolerant of a stopped server.
  DS.refresh = async function () {
    if (DS.api.info) {
      try {
        DS.appInfo = await DS.api.info();
      } catch (_) { /* keep the last */ }
      const i = DS.appInfo || {};
      if (!i.running) {
        stoppedServer = true;
        const d = i.download;
        const fetching = d && d.total > 0 ? 'downloading ' + Math.floor((100 * d.done) / d.total) + '%…' : 'loading model…';
        serverState(i.loading ? 'busy' : 'down', i.loading ? fetching : (i.error || 'server stopped'));
        $('model-pill').textContent = i.loading ? 'loading ' + (i.model || '') + '…' : 'no model served';
        DS.panels.showModel(null);
        DS.currentModel = null;
        return;
      }
    }
    try {
      const models = await DS.api.get('/v1/models');
      const m = models.data && models.data[0];
      const x = (m && m.x_dspark) || {};
      DS.currentModel = m ? { id: m.id, mode: x.mode, target: x.target, drafter: x.drafter,
        context_length: x.context_length } : null;
      $('model-pill').textContent = m ? m.id + ' · ' + x.mode : 'no model';
      DS.panels.showModel(DS.currentModel);
      const listening = !DS.appInfo || DS.appInfo.listening;
      serverState(DS.gauges.busy ? 'busy' : (listening ? 'up' : 'down'),
        DS.gauges.busy ? 'generating' : (listening ? 'serving' : 'endpoint stopped'));
      if (stoppedServer) { stoppedServer = false; $('error-banner').hidden = true; }
    } catch (e) {
      serverState('down', 'unreachable');
      $('model-pill').textContent = 'not connected';
      if (e.status === 401) DS.showError(e.message);
      return;
    }
    try { DS.gauges.metrics(await DS.api.get('/metrics')); } catch (_) { /* optional */ }
    try { DS.gauges.live(await DS.api.get('/api/live')); } catch (_) { /* optional */ }
  };

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      await DS.refresh().catch(() => {});
      schedule();
    }, DS.gauges.busy ? 500 : 3000);
  }
  DS.refreshSoon = function () {
    clearTimeout(timer);
    timer = setTimeout(async () => { await DS.refresh().catch(() => {}); schedule(); }, 150);
  };

  async function init() {
    $('error-banner').querySelector('.close').addEventListener('click', () => { $('error-banner').hidden = true; });
    document.querySelectorAll('#tabs button').forEach((b) => b.addEventListener('click', () => showTab(b.dataset.tab)));
    const app = DS.api.kind === 'ipc';
    $('transport-pill').textContent = app ? 'desktop app' : 'browser';
    try {
      DS.settings = (await DS.api.loadSettings()) || {};
    } catch (e) {
      DS.settings = {};
      DS.showError(e.message);
    }
    DS.panels.fillSettings(DS.settings);
    DS.chat.init();
    DS.chat.applyDefaults(DS.settings);
    DS.panels.initSettings(app
      ? 'Saved to the dspark settings file (shared with `dspark serve`). Port and API key apply when the server restarts (Start/Stop Server in the tray menu).'
      : 'Saved in this browser (localStorage). The API key is sent with every request; port, thinking and max draft defaults for the server are set with `dspark serve` flags or in the desktop app.');
    DS.panels.initEndpoint();
    DS.panels.initModels();
    if (app) {
      DS.api.listen('live', (s) => { DS.gauges.live(s); });
      DS.api.listen('server', () => { DS.refreshSoon(); });
      DS.api.listen('load-progress', () => { DS.refreshSoon(); });
      DS.api.listen('navigate', (tab) => showTab(tab));
    }
    await DS.refresh().catch(() => {});
    DS.renderEndpoint();
    schedule();
    document.body.dataset.ready = '1';
  }

  window.addEventListener('DOMContentLoaded', init);
})(window.DS);
