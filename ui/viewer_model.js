// crl trajectory viewer, part 1: the data model (no DOM). Export records (PROTOCOL.md section 1, proto
// JSON: int64 fields may be strings, enums are names) become rollouts with typed provenance codes, masks and
// the advantages mapped per segment; ui/viewer.js renders them. Exposed as window.crlViewerModel.
'use strict';
window.crlViewerModel = (function () {
  const kProvenance = ['prompt', 'environment', 'sampled', 'copied summary', 'copied tail', 'forced'];
  const kProvenanceCode = {
    PROMPT: 0, ENVIRONMENT: 1, SAMPLED: 2, COPIED_SUMMARY: 3, COPIED_TAIL: 4, FORCED: 5,
  };
  function fmt(x, digits) {
    if (x === undefined || x === null || Number.isNaN(x)) return '-';
    const v = Number(x);
    // Tiny numbers (a correction factor of 0.9^600) keep their magnitude instead of printing as 0.000.
    if (v !== 0 && Math.abs(v) < 1e-3) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 3 : digits);
  }

  // ---------- the data model ----------
  function num(v, fallback) {
    if (v === undefined || v === null || v === '') return fallback;
    const n = Number(v);
    return Number.isFinite(n) ? n : fallback;
  }
  function provenanceCodes(list) {
    const out = new Uint8Array(list ? list.length : 0);
    for (let i = 0; i < out.length; ++i) {
      const p = list[i];
      out[i] = typeof p === 'number' ? p : (kProvenanceCode[p] !== undefined ? kProvenanceCode[p] : 0);
    }
    return out;
  }
  // One export record (PROTOCOL.md section 1, proto JSON) -> the segment the page works with.
  function normalizeSegment(rec) {
    const promptIds = rec.prompt_ids || [], responseIds = rec.response_ids || [];
    return {
      rolloutId: String(rec.rollout_id || ''),
      index: num(rec.segment_index, 0),
      kind: rec.kind || 'execution',
      promptIds, responseIds,
      promptProv: provenanceCodes(rec.prompt_provenance),
      responseProv: provenanceCodes(rec.response_provenance),
      actor: rec.loss_mask || [],
      critic: rec.critic_mask || [],
      logprobs: rec.rollout_log_probs || [],
      values: rec.values || [],
      reward: num(rec.reward, 0),
      status: rec.status || '',
      finishReason: rec.finish_reason || '',
      nSampled: num(rec.n_sampled, 0),
      nAfter: num(rec.n_after, 0),
      compactionIndex: num(rec.compaction_index, 0),
      text: rec.response_text || '',
      taskId: rec.task_id || '',
      env: rec.env || '',
      metadata: rec.metadata || {},
    };
  }
  function vocabArray(vocab) {
    if (!vocab) return null;
    const out = [];
    for (const key of Object.keys(vocab)) out[Number(key)] = vocab[key];
    return out;
  }
  // The embedded document (ui/viewer_data.h) -> the model.
  function normalizeData(doc) {
    const vocabs = (doc.vocabs || []).map(vocabArray);
    const rollouts = (doc.rollouts || []).map((ro) => makeRollout(
        (ro.segments || []).map(normalizeSegment),
        ro.vocab !== undefined && ro.vocab >= 0 ? vocabs[ro.vocab] : null, ro.advantages || null));
    return { source: doc.source || '', advantagesSource: doc.advantages_source || '', rollouts };
  }
  // Export records in file order (an ExportResponse or a JSONL file) -> rollouts, grouped by rollout_id.
  function dataFromRecords(records, source) {
    const rollouts = [];
    let current = null;
    for (const rec of records) {
      const seg = normalizeSegment(rec);
      if (!current || current.id !== seg.rolloutId) {
        current = { id: seg.rolloutId, segments: [] };
        rollouts.push(current);
      }
      current.segments.push(seg);
    }
    return {
      source, advantagesSource: '',
      rollouts: rollouts.map((r) => makeRollout(r.segments, knownVocab(r.segments[0].metadata), null)),
    };
  }
  // Exports fetched from a server carry no token texts; the built-in byte tokenizer (README: ids 0-255 are
  // bytes, 256-258 the ChatML specials) is known here, so its text view is readable. Others show ids.
  function knownVocab(metadata) {
    if (!metadata || metadata.tokenizer !== 'byte' || metadata.view !== 'text') return null;
    const out = [];
    for (let id = 0; id < 256; ++id) {
      out[id] = id < 0x80 ? String.fromCharCode(id) : '\\x' + id.toString(16).padStart(2, '0');
    }
    out.push('<|endoftext|>', '<|im_start|>', '<|im_end|>');
    return out;
  }
  function makeRollout(segments, vocab, advantages) {
    const first = segments[0] || {};
    let actorTokens = 0, criticTokens = 0, tokens = 0, maxAbsAdv = 0, vMin = Infinity, vMax = -Infinity;
    segments.forEach((s, i) => {
      for (const m of s.actor) actorTokens += m ? 1 : 0;
      for (const m of s.critic) criticTokens += m ? 1 : 0;
      tokens += s.promptIds.length + s.responseIds.length;
      s.adv = advantages ? advantages[i] : null;
      if (s.adv) for (const a of s.adv.advantages) maxAbsAdv = Math.max(maxAbsAdv, Math.abs(a));
      const values = s.adv && s.adv.values && s.adv.values.length ? s.adv.values : s.values;
      s.heatValues = values;
      for (let t = 0; t < values.length; ++t) {
        if (!s.critic[t]) continue;
        vMin = Math.min(vMin, values[t]);
        vMax = Math.max(vMax, values[t]);
      }
    });
    return {
      id: first.rolloutId || '', taskId: first.taskId || '', env: first.env || '', reward: first.reward,
      status: first.status || '', metadata: first.metadata || {}, segments, vocab, hasAdvantages: !!advantages,
      actorTokens, criticTokens, tokens, maxAbsAdv, vMin: Number.isFinite(vMin) ? vMin : 0,
      vMax: Number.isFinite(vMax) ? vMax : 0,
      compactions: segments.filter((s) => s.kind === 'summary').length,
    };
  }

  // ---------- token text ----------
  function piece(rollout, id) {
    const text = rollout.vocab ? rollout.vocab[id] : undefined;
    return text === undefined ? '\u2039' + id + '\u203a' : text;
  }
  // What a token shows: newlines and tabs made visible (the line break itself comes from the line layout).
  function shown(text) {
    return text.replace(/\n/g, '\u21b5').replace(/\t/g, '\u21e5').replace(/\r/g, '\u240d');
  }
  function joinPieces(rollout, ids, prov, wanted) {
    let out = '';
    for (let i = 0; i < ids.length; ++i) if (prov[i] === wanted) out += piece(rollout, ids[i]);
    return out;
  }

  // ---------- colour scales ----------
  function heatColor(t) {  // t in [-1, 1]: blue (negative) .. white .. red (positive)
    const a = Math.min(1, Math.abs(t));
    return t >= 0 ? 'hsl(0, 85%, ' + (100 - 40 * a) + '%)' : 'hsl(220, 85%, ' + (100 - 40 * a) + '%)';
  }
  function valueColor(t) {  // t in [0, 1]
    return 'hsl(150, 55%, ' + (97 - 45 * Math.min(1, Math.max(0, t))) + '%)';
  }
  // ---------- JSONL exports (a file opened in serve mode) ----------
  function parseJsonl(text, source) {
    const records = [];
    text.split('\n').forEach((line, i) => {
      if (!line.trim()) return;
      try {
        records.push(JSON.parse(line));
      } catch (e) {
        throw new Error(source + ': line ' + (i + 1) + ' is not JSON (' + e.message + ')');
      }
    });
    return records;
  }
  return {
    kProvenance, fmt, normalizeData, dataFromRecords, piece, shown, joinPieces, heatColor, valueColor, parseJsonl,
  };
})();
