// Renders chat templates with @huggingface/jinja (what transformers.js uses), the second independent
// reference of tests/engine/chat_template_oracle_test.cpp. Same input and output as oracle.py.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

// strftime_now at the case's fixed UTC time (the formats templates use: %Y %m %d %b %B %H %M %S %%).
function strftime(now, format) {
  const d = new Date(now * 1000);
  const pad = (n) => String(n).padStart(2, "0");
  const months = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December"];
  const fields = { Y: String(d.getUTCFullYear()), m: pad(d.getUTCMonth() + 1), d: pad(d.getUTCDate()),
    b: months[d.getUTCMonth()].slice(0, 3), B: months[d.getUTCMonth()], H: pad(d.getUTCHours()),
    M: pad(d.getUTCMinutes()), S: pad(d.getUTCSeconds()), "%": "%" };
  return format.replace(/%(.)/g, (all, c) => fields[c] ?? all);
}

const cases = JSON.parse(readFileSync(process.argv[2], "utf-8"));
const out = [];
for (const c of cases) {
  try {
    const variables = {};
    if (c.bos_token) variables.bos_token = c.bos_token;
    if (c.eos_token) variables.eos_token = c.eos_token;
    Object.assign(variables, {
      messages: c.messages,
      tools: c.tools ?? null,
      documents: null,
      add_generation_prompt: c.add_generation_prompt ?? false,
      fixed_strftime_now: (format) => strftime(c.now ?? 0, format),
    }, c.extra ?? {});
    // @huggingface/jinja's own strftime_now reads the clock and cannot be replaced: call ours instead.
    const source = c.template.replaceAll("strftime_now(", "fixed_strftime_now(");
    out.push({ text: new Template(source).render(variables) });
  } catch (e) {
    out.push({ error: String(e && e.message ? e.message : e) });
  }
}
process.stdout.write(JSON.stringify(out));
