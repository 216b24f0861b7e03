// crl trajectory viewer (issue 16 item 4). One page, no dependencies, no network except, in `crl serve`
// mode, GET requests to its own origin for an episode's export.
//
// Safety: every datum comes from a trajectory an attacker may have shaped (environment text), so it is put
// into the page only through textContent / property setters, never innerHTML; the data itself arrives as
// script-safe JSON in <script type="application/json"> (ui/viewer_page.cpp).
//
// Lazy rendering: a segment's tokens are cut into lines (at newlines, or every kLineTokens tokens); only
// the lines inside the scrolled view (plus a margin) exist in the DOM, so a 100k-token rollout opens at
// once. The page reports what it rendered in data-* attributes of #app (tests read them).
'use strict';
(function () {
  const {
    kProvenance, fmt, normalizeData, dataFromRecords, piece, shown, joinPieces, heatColor, valueColor, parseJsonl,
  } = window.crlViewerModel;
  const started = performance.now();  // data-render-ms counts from here: parsing the data included
  const kLineTokens = 100;  // longest rendered line, in tokens
  const kOverscan = 10;     // lines rendered above and below the view
  const kModes = ['provenance', 'advantage', 'value', 'actor', 'critic'];

  const $ = (id) => document.getElementById(id);
  const app = $('app');
  const state = {
    data: null,       // {source, advantagesSource, rollouts: [rollout]}
    rollout: 0,       // selected rollout index
    segment: 0,       // selected segment index
    mode: 'provenance',
    lines: null,      // Int32Array of line starts for the selected segment (token indices)
    rangeShown: '',   // the rendered line range, to skip needless re-renders
  };

  // ---------- small DOM helpers (text only) ----------
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function kv(parent, key, value) {
    const span = el('span', 'kv');
    span.append(el('span', 'k', key + ' '), el('b', '', value));
    parent.append(span);
  }
  function showMessage(text) { $('message').textContent = text; }
  // ---------- legend ----------
  function drawScale(colorOf, from, to) {
    const canvas = el('canvas', 'heat-scale');
    canvas.width = 160;
    canvas.height = 12;
    const ctx = canvas.getContext('2d');
    for (let x = 0; x < 160; ++x) {
      ctx.fillStyle = colorOf(from + (to - from) * x / 159);
      ctx.fillRect(x, 0, 1, 12);
    }
    return canvas;
  }
  function renderLegend() {
    const legend = $('legend');
    legend.textContent = '';
    kProvenance.forEach((name, code) => legend.append(el('span', 'swatch tok p' + code, name)));
    const am = el('span', 'swatch tok am', 'actor mask');
    const cm = el('span', 'swatch tok cm', 'critic mask');
    legend.append(am, cm);
    const r = currentRollout();
    if (state.mode === 'advantage') {
      legend.append(el('span', '', 'advantage'), el('span', '', '-' + fmt(r ? r.maxAbsAdv : 0)),
                    drawScale(heatColor, -1, 1), el('span', '', '+' + fmt(r ? r.maxAbsAdv : 0)));
      if (r && !r.hasAdvantages) legend.append(el('span', '', '(no advantages given: crl inspect --advantages)'));
    } else if (state.mode === 'value') {
      legend.append(el('span', '', 'value ' + fmt(r ? r.vMin : 0)), drawScale(valueColor, 0, 1),
                    el('span', '', fmt(r ? r.vMax : 0)));
    }
  }

  // ---------- the rollout list ----------
  function renderRolloutList() {
    const nav = $('rollouts');
    nav.textContent = '';
    state.data.rollouts.forEach((r, i) => {
      const b = el('button', i === state.rollout ? 'selected' : '');
      b.type = 'button';
      b.dataset.rollout = String(i);
      b.append(el('span', '', r.id || '(rollout ' + i + ')'),
               el('span', 'meta', 'R ' + fmt(r.reward, 2) + ' \u00b7 ' + r.segments.length + ' seg \u00b7 ' +
                                      r.compactions + ' comp \u00b7 ' + r.status));
      nav.append(b);
    });
  }

  function currentRollout() { return state.data && state.data.rollouts[state.rollout]; }

  // ---------- lanes: one per segment, compaction boundaries between them ----------
  function drawMinimap(canvas, seg, width) {
    canvas.width = Math.max(1, Math.round(width));
    canvas.height = 14;
    canvas.style.width = canvas.width + 'px';
    const ctx = canvas.getContext('2d');
    const total = seg.promptIds.length + seg.responseIds.length;
    const style = getComputedStyle(document.documentElement);
    const colors = ['--prompt', '--environment', '--sampled', '--copied-summary', '--copied-tail', '--forced'].map(
        (name) => style.getPropertyValue(name).trim());
    const provAt = (i) => (i < seg.promptIds.length ? seg.promptProv[i] : seg.responseProv[i - seg.promptIds.length]);
    if (total > 2 * canvas.width) {
      // More tokens than pixels: each pixel column shows the most frequent provenance of its tokens, except
      // that any sampled token wins (the trainable tokens are what a reader looks for).
      for (let x = 0; x < canvas.width; ++x) {
        const counts = [0, 0, 0, 0, 0, 0];
        const end = Math.floor(((x + 1) * total) / canvas.width);
        for (let i = Math.floor((x * total) / canvas.width); i < end; ++i) ++counts[provAt(i)];
        const best = counts[2] > 0 ? 2 : counts.indexOf(Math.max(...counts));
        ctx.fillStyle = colors[best] || '#999';
        ctx.fillRect(x, 0, 1, 14);
      }
    } else {
      let start = 0;
      for (let i = 1; i <= total; ++i) {  // one rectangle per run of equal provenance
        if (i < total && provAt(i) === provAt(start)) continue;
        ctx.fillStyle = colors[provAt(start)] || '#999';
        const x0 = (start / total) * canvas.width, x1 = (i / total) * canvas.width;
        ctx.fillRect(x0, 0, Math.max(1, x1 - x0), 14);
        start = i;
      }
    }
    const x = (seg.promptIds.length / Math.max(1, total)) * canvas.width;  // prompt | response
    ctx.fillStyle = '#111827';
    ctx.fillRect(Math.min(canvas.width - 1, x), 0, 1, 14);
  }
  function rebuildParts(r, seg) {
    const summary = joinPieces(r, seg.promptIds, seg.promptProv, 3);
    const tail = joinPieces(r, seg.promptIds, seg.promptProv, 4);
    let system = 0, summaryTokens = 0, tailTokens = 0;
    for (const p of seg.promptProv) {
      if (p === 3) ++summaryTokens; else if (p === 4) ++tailTokens; else ++system;
    }
    // An atomic step starts with an assistant turn (ChatML); count them in the copied tail when we can.
    const steps = (tail.match(/<\|im_start\|>assistant/g) || []).length;
    return { summary, tail, system, summaryTokens, tailTokens, steps };
  }
  function renderLanes() {
    const r = currentRollout();
    const lanes = $('lanes');
    lanes.textContent = '';
    const longest = Math.max(1, ...r.segments.map((s) => s.promptIds.length + s.responseIds.length));
    const width = Math.max(200, lanes.clientWidth - 260);
    let boundaries = 0;
    r.segments.forEach((seg, i) => {
      if (i > 0 && seg.kind === 'execution' && seg.compactionIndex > r.segments[i - 1].compactionIndex) {
        const parts = rebuildParts(r, seg);
        const b = el('div', 'boundary',
                     'compaction ' + seg.compactionIndex + ': rebuilt from system + resume (' + parts.system +
                         ' tok) + summary (' + parts.summaryTokens + ' tok) + tail (' + parts.tailTokens +
                         ' tok' + (parts.tailTokens ? ', ' + parts.steps + ' steps' : '') + ')');
        b.dataset.boundary = String(seg.compactionIndex);
        lanes.append(b);
        ++boundaries;
      }
      const lane = el('div', 'lane' + (i === state.segment ? ' selected' : ''));
      lane.dataset.segment = String(i);
      lane.dataset.kind = seg.kind;
      const label = el('div', 'label');
      label.append(el('span', 'kind-' + seg.kind, 'S' + i + ' ' + seg.kind),
                   document.createTextNode(' ' + seg.promptIds.length + '+' + seg.responseIds.length + ' tok, n_s ' +
                                           seg.nSampled + ', N_after ' + seg.nAfter +
                                           (seg.adv ? ', factor ' + fmt(seg.adv.factor, 4) : '')));
      const canvas = el('canvas');
      drawMinimap(canvas, seg, width * (seg.promptIds.length + seg.responseIds.length) / longest);
      lane.append(label, canvas);
      if (seg.kind === 'summary') {
        const text = seg.text || joinPieces(r, seg.responseIds, seg.responseProv, 2);
        const summary = el('div', 'summary-text', text);
        summary.title = text;
        lane.append(summary);
      }
      lanes.append(lane);
    });
    app.dataset.boundaryCount = String(boundaries);
  }

  // ---------- the selected segment: header, rebuild, tokens ----------
  function renderSegmentHead() {
    const r = currentRollout(), seg = r.segments[state.segment];
    const head = $('segment-head');
    head.textContent = '';
    kv(head, 'segment', state.segment + ' / ' + r.segments.length + ' (' + seg.kind + ')');
    kv(head, 'compaction index', seg.compactionIndex);
    kv(head, 'prompt', seg.promptIds.length);
    kv(head, 'response', seg.responseIds.length);
    kv(head, 'n_s', seg.nSampled);
    kv(head, 'N_after', seg.nAfter);
    kv(head, 'finish', seg.finishReason || '-');
    if (seg.adv) {
      kv(head, 'lambda', fmt(seg.adv.lambda, 4));
      kv(head, 'correction factor', fmt(seg.adv.factor, 6));
    }
    const rebuild = $('rebuild');
    rebuild.textContent = '';
    if (seg.kind === 'execution' && seg.compactionIndex > 0) {
      const parts = rebuildParts(r, seg);
      rebuild.append(el('b', '', 'What the rebuild kept: '),
                     document.createTextNode('system + resume preface ' + parts.system + ' tokens, copied summary ' +
                                             parts.summaryTokens + ' tokens, copied tail ' + parts.tailTokens +
                                             ' tokens' + (parts.tailTokens ? ' (' + parts.steps + ' steps)' : '')));
      for (const [name, text, code] of [['summary', parts.summary, 3], ['tail', parts.tail, 4]]) {
        if (!text) continue;
        const part = el('div', 'part');
        const pre = el('pre', 'tok p' + code, text);
        pre.dataset.part = name;
        part.append(el('span', '', 'copied ' + name + ':'), pre);
        rebuild.append(part);
      }
    }
  }

  // Token layout of the selected segment: prompt tokens, then response tokens, cut into lines.
  function layoutLines(r, seg) {
    const starts = [0];
    const total = seg.promptIds.length + seg.responseIds.length;
    let count = 0;
    for (let i = 0; i < total; ++i) {
      const response = i >= seg.promptIds.length;
      if (i === seg.promptIds.length && i > 0 && starts[starts.length - 1] !== i) {
        starts.push(i);  // the response starts on its own line
        count = 0;
      }
      const id = response ? seg.responseIds[i - seg.promptIds.length] : seg.promptIds[i];
      ++count;
      const text = piece(r, id);
      if ((text.endsWith('\n') || count >= kLineTokens) && i + 1 < total) {
        starts.push(i + 1);
        count = 0;
      }
    }
    return Int32Array.from(starts);
  }
  function tokenClass(seg, i) {
    const p = seg.promptIds.length;
    if (i < p) return state.mode === 'provenance' ? 'tok p' + seg.promptProv[i] : 'tok dim';
    const j = i - p;
    const actor = seg.actor[j] ? ' am' : '', critic = seg.critic[j] ? ' cm' : '';
    switch (state.mode) {
      case 'actor': return seg.actor[j] ? 'tok p2 am' : 'tok dim';
      case 'critic': return seg.critic[j] ? 'tok p1 cm' : 'tok dim';
      case 'advantage': return seg.adv && seg.actor[j] ? 'tok' + actor : 'tok dim';
      case 'value': return seg.critic[j] && seg.heatValues.length ? 'tok' + critic : 'tok dim';
      default: return 'tok p' + seg.responseProv[j] + actor + critic;
    }
  }
  function tokenBackground(r, seg, i) {
    const j = i - seg.promptIds.length;
    if (j < 0) return '';
    if (state.mode === 'advantage' && seg.adv && seg.actor[j]) {
      return heatColor(r.maxAbsAdv > 0 ? seg.adv.advantages[j] / r.maxAbsAdv : 0);
    }
    if (state.mode === 'value' && seg.critic[j] && seg.heatValues.length) {
      const span = r.vMax - r.vMin;
      return valueColor(span > 0 ? (seg.heatValues[j] - r.vMin) / span : 0.5);
    }
    return '';
  }
  function renderTokens(force) {
    const r = currentRollout(), seg = r.segments[state.segment];
    const box = $('tokens'), windowEl = $('tokens-window');
    const lineHeight = 18;
    const lines = state.lines;
    const total = seg.promptIds.length + seg.responseIds.length;
    const first = Math.max(0, Math.floor(box.scrollTop / lineHeight) - kOverscan);
    const last = Math.min(lines.length, Math.ceil((box.scrollTop + box.clientHeight) / lineHeight) + kOverscan);
    const key = state.rollout + ':' + state.segment + ':' + state.mode + ':' + first + ':' + last;
    if (!force && key === state.rangeShown) return;
    state.rangeShown = key;
    const fragment = document.createDocumentFragment();
    let nodes = 0;
    for (let l = first; l < last; ++l) {
      const begin = lines[l], end = l + 1 < lines.length ? lines[l + 1] : total;
      const line = el('div', 'line' + (begin === seg.promptIds.length && begin > 0 ? ' section' : ''));
      line.append(el('span', 'ln', begin === seg.promptIds.length && begin > 0 ? 'resp ' + begin : begin));
      for (let i = begin; i < end; ++i) {
        const id = i < seg.promptIds.length ? seg.promptIds[i] : seg.responseIds[i - seg.promptIds.length];
        const tok = el('span', tokenClass(seg, i), shown(piece(r, id)));
        tok.dataset.i = String(i);
        const bg = tokenBackground(r, seg, i);
        if (bg) tok.style.background = bg;  // CSSOM, allowed by the style-src policy
        line.append(tok);
        ++nodes;
      }
      fragment.append(line);
    }
    windowEl.style.top = first * lineHeight + 'px';
    windowEl.replaceChildren(fragment);
    app.dataset.tokenNodes = String(nodes);
    app.dataset.linesShown = first + '-' + last;
  }

  // Scrolls the token view to the line holding token i (prompt tokens first, then the response).
  function scrollToToken(i) {
    const lines = state.lines;
    if (!lines) return;
    let lo = 0, hi = lines.length - 1;
    while (lo < hi) {  // the last line starting at or before i
      const mid = (lo + hi + 1) >> 1;
      if (lines[mid] <= i) lo = mid; else hi = mid - 1;
    }
    $('tokens').scrollTop = lo * 18;
    renderTokens(false);
    describeToken(Math.max(0, Math.min(i, Number(app.dataset.segmentTokens) - 1)));
  }
  function describeToken(i) {
    const r = currentRollout(), seg = r.segments[state.segment];
    const p = seg.promptIds.length;
    const id = i < p ? seg.promptIds[i] : seg.responseIds[i - p];
    const prov = i < p ? seg.promptProv[i] : seg.responseProv[i - p];
    let text = (i < p ? 'prompt' : 'response') + ' token ' + (i < p ? i : i - p) + ': id ' + id + ' ' +
        JSON.stringify(piece(r, id)) + ', ' + kProvenance[prov];
    if (i >= p) {
      const j = i - p;
      text += ', actor ' + (seg.actor[j] || 0) + ', critic ' + (seg.critic[j] || 0) + ', log-prob ' +
          fmt(seg.logprobs[j], 4) + ', value ' + fmt(seg.heatValues[j], 4);
      if (seg.adv) text += ', advantage ' + fmt(seg.adv.advantages[j], 5) + ', return ' + fmt(seg.adv.returns[j], 4);
    }
    $('token-info').textContent = text;
  }

  // ---------- selection and rendering ----------
  function renderRollout() {
    const r = currentRollout();
    const head = $('rollout-head');
    head.textContent = '';
    kv(head, 'rollout', r.id || state.rollout);
    kv(head, 'env', r.env);
    kv(head, 'task', r.taskId);
    kv(head, 'reward', fmt(r.reward, 3));
    kv(head, 'status', r.status);
    kv(head, 'segments', r.segments.length);
    kv(head, 'compactions', r.compactions);
    kv(head, 'tokens', r.tokens);
    kv(head, 'actor-masked tokens', r.actorTokens);
    kv(head, 'critic-masked tokens', r.criticTokens);
    if (r.metadata.dropped_segments && r.metadata.dropped_segments !== '0') {
      kv(head, 'dropped segments', r.metadata.dropped_segments);
    }
    kv(head, 'advantages', r.hasAdvantages ? state.data.advantagesSource : 'none');
    app.dataset.rolloutId = r.id;
    app.dataset.segmentCount = String(r.segments.length);
    app.dataset.actorMasked = String(r.actorTokens);
    app.dataset.criticMasked = String(r.criticTokens);
    app.dataset.hasAdvantages = r.hasAdvantages ? '1' : '0';
    renderLanes();
  }
  function selectSegment(index) {
    const r = currentRollout();
    if (!r || r.segments.length === 0) return;
    state.segment = Math.max(0, Math.min(r.segments.length - 1, index));
    for (const lane of document.querySelectorAll('.lane')) {
      lane.classList.toggle('selected', Number(lane.dataset.segment) === state.segment);
    }
    const seg = r.segments[state.segment];
    state.lines = layoutLines(r, seg);
    app.dataset.segment = String(state.segment);
    app.dataset.segmentTokens = String(seg.promptIds.length + seg.responseIds.length);
    app.dataset.lineCount = String(state.lines.length);
    $('tokens-spacer').style.height = state.lines.length * 18 + 'px';
    $('tokens').scrollTop = 0;
    $('token-info').textContent = '';
    renderSegmentHead();
    renderTokens(true);
  }
  function selectRollout(index) {
    const n = state.data.rollouts.length;
    if (n === 0) return;
    state.rollout = Math.max(0, Math.min(n - 1, index));
    app.dataset.rollout = String(state.rollout);
    for (const b of $('rollouts').children) b.classList.toggle('selected', Number(b.dataset.rollout) === state.rollout);
    const selected = $('rollouts').children[state.rollout];
    if (selected) selected.scrollIntoView({ block: 'nearest' });
    renderRollout();
    renderLegend();
    selectSegment(0);
  }
  function setMode(mode) {
    if (!kModes.includes(mode)) return;
    state.mode = mode;
    $('color-mode').value = mode;
    app.dataset.mode = mode;
    renderLegend();
    if (currentRollout()) renderTokens(true);
  }

  function show(data) {
    state.data = data;
    $('source').textContent = data.source;
    app.dataset.rolloutCount = String(data.rollouts.length);
    renderRolloutList();
    if (data.rollouts.length === 0) {
      showMessage('no rollouts in ' + (data.source || 'the data'));
      return;
    }
    showMessage('');
    selectRollout(0);
    app.dataset.renderMs = String(Math.round(performance.now() - started));
    app.dataset.rendered = '1';
  }

  // ---------- keyboard ----------
  function onKey(event) {
    if (!state.data || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target && (target.tagName === 'INPUT' || target.tagName === 'SELECT')) return;
    const key = event.key;
    let handled = true;
    if (key === 'j' || key === 'ArrowDown') selectRollout(state.rollout + 1);
    else if (key === 'k' || key === 'ArrowUp') selectRollout(state.rollout - 1);
    else if (key === 'n' || key === 'ArrowRight') selectSegment(state.segment + 1);
    else if (key === 'p' || key === 'ArrowLeft') selectSegment(state.segment - 1);
    else if (key === 'Home') selectSegment(0);
    else if (key === 'End') selectSegment(currentRollout().segments.length - 1);
    else if (key >= '1' && key <= '5') setMode(kModes[Number(key) - 1]);
    else handled = false;
    if (handled) event.preventDefault();
  }

  // The page's address may select a view: #r=ROLLOUT&s=SEGMENT&c=MODE&t=TOKEN&keys=KEYS (t scrolls to a token
  // of the segment, prompt tokens counted first; keys are replayed through
  // the keyboard handler, which is how the browser test drives keyboard navigation).
  function applyHash() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ''));
    if (params.has('r')) selectRollout(Number(params.get('r')) || 0);
    if (params.has('s')) selectSegment(Number(params.get('s')) || 0);
    if (params.has('c')) setMode(params.get('c'));
    if (params.has('t')) scrollToToken(Number(params.get('t')) || 0);
    for (const key of (params.get('keys') || '').split(',').filter(Boolean)) {
      document.dispatchEvent(new KeyboardEvent('keydown', { key, bubbles: true }));
    }
  }

  // ---------- serve mode: exports fetched from this server, or a local file ----------
  // `recent`: from the ring of finished exports (GET /v1/exports/{id}, still there after DELETE or the
  // reaper); otherwise the live episode's export.
  async function loadEpisode(id, recent) {
    if (!id) return;
    try {
      const url = recent ? '/v1/exports/' + encodeURIComponent(id)
                         : '/v1/episodes/' + encodeURIComponent(id) + '/export';
      const answer = await fetch(url, { headers: { Accept: 'application/json' } });
      const body = await answer.json();
      if (!answer.ok) throw new Error(body.message || 'HTTP ' + answer.status);
      show(dataFromRecords(body.segments || [], (recent ? 'export ' : 'episode ') + id));
      app.dataset.source = (recent ? 'export:' : 'episode:') + id;
    } catch (e) {
      showMessage('could not load episode ' + id + ': ' + e.message);
    }
  }

  // The lists of GET /v1/episodes and GET /v1/exports (`crl serve --ui`; otherwise they answer 404
  // ui_disabled and the panel says how to turn them on). Entries are built as DOM nodes: ids, envs and task
  // ids are shown as text, never parsed as HTML.
  async function fetchList(path) {
    const answer = await fetch(path + '?limit=100', { headers: { Accept: 'application/json' } });
    const body = await answer.json();
    if (!answer.ok) {
      const error = new Error(body.message || 'HTTP ' + answer.status);
      error.code = body.code;
      throw error;
    }
    return body;
  }
  function listEntry(item, recent) {
    const li = document.createElement('li');
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.episode = item.episode_id;
    b.dataset.recent = recent ? '1' : '0';
    const when = item.created_unix_s ? new Date(item.created_unix_s * 1000).toISOString().slice(11, 19) : '';
    b.textContent = [when, item.env, item.task_id || '', item.status, (item.steps || 0) + ' steps',
                     (item.compactions || 0) + ' compactions', item.episode_id].join('  ');
    b.title = recent ? 'open the kept export' : (item.status === 'done' ? 'open the export'
                                                                        : 'still running: no export yet');
    li.appendChild(b);
    return li;
  }
  async function loadLists() {
    const panel = $('sessions');
    panel.hidden = false;
    try {
      const [live, recent] = await Promise.all([fetchList('/v1/episodes'), fetchList('/v1/exports')]);
      $('live-list').replaceChildren(...(live.episodes || []).map((x) => listEntry(x, false)));
      $('export-list').replaceChildren(...(recent.episodes || []).map((x) => listEntry(x, true)));
      panel.dataset.liveCount = String((live.episodes || []).length);
      panel.dataset.exportCount = String((recent.episodes || []).length);
      $('sessions-note').textContent = (live.total || 0) + ' live, ' + (recent.total || 0) + ' recent exports';
      panel.dataset.state = 'loaded';
    } catch (e) {
      panel.dataset.state = e.code === 'ui_disabled' ? 'disabled' : 'error';
      $('sessions-note').textContent = e.code === 'ui_disabled'
          ? 'lists are off on this server (start it with crl serve --ui); open an episode by id or a file'
          : 'could not list episodes: ' + e.message;
    }
  }
  function setupServe() {
    $('serve-controls').hidden = false;
    $('sessions').addEventListener('click', (e) => {
      const b = e.target.closest('button');
      if (!b) return;
      for (const other of $('sessions').querySelectorAll('button.selected')) other.classList.remove('selected');
      b.classList.add('selected');
      $('episode-id').value = b.dataset.episode;
      loadEpisode(b.dataset.episode, b.dataset.recent === '1');
    });
    $('load-episode').addEventListener('click', () => loadEpisode($('episode-id').value.trim()));
    $('episode-id').addEventListener('keydown', (e) => { if (e.key === 'Enter') loadEpisode(e.target.value.trim()); });
    $('load-file').addEventListener('change', (e) => {
      const file = e.target.files[0];
      if (!file) return;
      file.text().then((text) => {
        try {
          const doc = text.trim().startsWith('{"version"') ? null : parseJsonl(text, file.name);
          show(doc ? dataFromRecords(doc, file.name) : normalizeData(JSON.parse(text)));
        } catch (err) {
          showMessage(err.message);
        }
      });
    });
    const query = new URLSearchParams(location.search);
    const episode = query.get('episode');
    // ?pick=live:N or ?pick=exports:N clicks the N-th entry of a list once it is shown (how the browser test
    // opens an entry).
    const pick = query.get('pick');
    loadLists().then(() => {
      if (!pick) return;
      const [list, n] = pick.split(':');
      const buttons = $(list === 'live' ? 'live-list' : 'export-list').querySelectorAll('button');
      if (buttons[Number(n) || 0]) buttons[Number(n) || 0].click();
    });
    if (episode) {
      $('episode-id').value = episode;
      loadEpisode(episode, query.get('recent') === '1');
    } else if (!pick) {
      showMessage('pick an episode above, enter an episode id (POST /v1/episodes created it) or open an ' +
                  'exported .jsonl file');
    }
  }

  // ---------- start ----------
  document.addEventListener('keydown', onKey);
  $('color-mode').addEventListener('change', (e) => setMode(e.target.value));
  $('rollouts').addEventListener('click', (e) => {
    const b = e.target.closest('button');
    if (b) selectRollout(Number(b.dataset.rollout));
  });
  $('lanes').addEventListener('click', (e) => {
    const lane = e.target.closest('.lane');
    if (lane) selectSegment(Number(lane.dataset.segment));
  });
  $('tokens').addEventListener('scroll', () => requestAnimationFrame(() => renderTokens(false)));
  $('tokens-window').addEventListener('mouseover', (e) => {
    const tok = e.target.closest('.tok');
    if (tok && tok.dataset.i !== undefined) describeToken(Number(tok.dataset.i));
  });
  window.addEventListener('hashchange', applyHash);

  let doc = null;
  try {
    doc = JSON.parse($('crl-data').textContent);
  } catch (e) {
    showMessage('the embedded data is not valid JSON: ' + e.message);
    app.dataset.error = 'data';
  }
  if (document.body.dataset.mode === 'serve' || doc === null) {
    if (document.body.dataset.mode === 'serve') setupServe();
  } else {
    show(normalizeData(doc));
    applyHash();
  }
  renderLegend();
})();
