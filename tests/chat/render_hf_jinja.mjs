// Renders every case in cases.json with @huggingface/jinja (the Jinja implementation used by
// transformers.js), a second implementation to cross-check ours against. Prints one JSON object
// {case name: {"ok": true, "output": ...} | {"ok": false, "error": ...}} on stdout.
// Usage: node render_hf_jinja.mjs <tests/chat dir> <tools/node/node_modules dir>
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [dir, nodeModules] = process.argv.slice(2);
const require = createRequire(path.resolve(nodeModules, "noop.js"));
const { Template } = require("@huggingface/jinja");

const manifest = JSON.parse(readFileSync(path.join(dir, "cases.json"), "utf8"));
const conversations = JSON.parse(readFileSync(path.join(dir, "conversations.json"), "utf8"));

// strftime_now is a builtin there that reads `new Date()`: pin the clock to the manifest's time
// (UTC, as our test pins it) so both sides format the same date.
process.env.TZ = "UTC";
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [manifest.now * 1000]));
  }
};

const results = {};
const templates = new Map();
for (const c of manifest.cases) {
  try {
    if (!templates.has(c.template)) {
      const source = readFileSync(path.join(dir, "templates", c.template + ".jinja"), "utf8");
      templates.set(c.template, new Template(source));
    }
    const conv = conversations[c.conversation];
    const context = {
      ...(c.kwargs ?? {}),
      messages: conv.messages,
      tools: conv.tools ?? null,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: c.bos_token,
      eos_token: c.eos_token,
    };
    results[c.name] = { ok: true, output: templates.get(c.template).render(context) };
  } catch (e) {
    results[c.name] = { ok: false, error: String(e && e.message ? e.message : e) };
  }
}
process.stdout.write(JSON.stringify(results));
