// Encode throughput of Hugging Face tokenizers (npm `tokenizers`, Rust) on the same corpus
// and documents as bench/tokenizer_encode.cc: one document per encode call, awaited in turn,
// so the Rust side runs single-threaded (RAYON_NUM_THREADS=1 also set by run_bench.sh).
// Prints per-run MB/s, the median, and the same id checksum as the C++ benchmark.
// Usage: NODE_PATH=tools/node/node_modules node bench/tokenizer/hf_tokenizers_bench.js \
//          [--runs N] [--corpus bench/out/corpus.txt] tokenizer.json...
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

const args = process.argv.slice(2);
let runs = 5;
let corpusPath = 'bench/out/corpus.txt';
const paths = [];
for (let i = 0; i < args.length; ++i) {
  if (args[i] === '--runs') runs = parseInt(args[++i], 10);
  else if (args[i] === '--corpus') corpusPath = args[++i];
  else paths.push(args[i]);
}

(async () => {
  const corpus = fs.readFileSync(corpusPath);
  // Split on the byte sequence "\n\x1e\n" and decode each document as UTF-8.
  const docs = [];
  let bytes = 0;
  let pos = 0;
  for (;;) {
    const next = corpus.indexOf('\n\x1e\n', pos, 'latin1');
    const end = next < 0 ? corpus.length : next;
    docs.push(corpus.subarray(pos, end).toString('utf8'));
    bytes += end - pos;
    if (next < 0) break;
    pos = next + 3;
  }
  console.log(`corpus: ${bytes} bytes, ${docs.length} documents`);
  const toks = paths.map((p) => Tokenizer.fromFile(p));
  const mbps = paths.map(() => []);
  const cpuMbps = paths.map(() => []);
  const result = paths.map(() => ({ n: 0, sum: 0n }));
  const mask = (1n << 64n) - 1n;
  for (let r = 0; r < runs + 1; ++r) {  // run 0 warms caches and is not counted
    for (let k = 0; k < toks.length; ++k) {
      const t0 = process.hrtime.bigint();
      const c0 = process.cpuUsage();
      const all = [];
      for (const d of docs) {
        const e = await toks[k].encode(d, null, { addSpecialTokens: false });
        all.push(e.getIds());
      }
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      // CPU time of the whole process (the Rust work runs on a libuv worker thread; the
      // main thread waits): on a shared machine wall time mostly measures the other tenants.
      const cu = process.cpuUsage(c0);
      const cpu = (cu.user + cu.system) / 1e6;
      // The checksum is computed outside the timed region.
      let n = 0;
      let sum = 0n;
      for (const ids of all) {
        n += ids.length;
        for (const id of ids) sum = (sum * 1000003n + BigInt(id)) & mask;
      }
      result[k] = { n, sum };
      const v = bytes / 1e6 / secs;
      const vc = bytes / 1e6 / cpu;
      if (r > 0) {
        mbps[k].push(v);
        cpuMbps[k].push(vc);
      }
      console.log(`run ${r} ${paths[k]}: wall ${secs.toFixed(3)} s ${v.toFixed(2)} MB/s, cpu ${cpu.toFixed(3)} s ` +
                  `${vc.toFixed(2)} MB/s, ${n} tokens`);
    }
  }
  for (let k = 0; k < toks.length; ++k) {
    const v = mbps[k].slice().sort((a, b) => a - b);
    const c = cpuMbps[k].slice().sort((a, b) => a - b);
    const f = (x) => x.toFixed(2);
    console.log(`RESULT ${paths[k]} wall median ${f(v[v.length >> 1])} MB/s (min ${f(v[0])}, max ${f(v[v.length - 1])}) ` +
                `cpu median ${f(c[c.length >> 1])} MB/s (min ${f(c[0])}, max ${f(c[c.length - 1])}) ` +
                `tokens ${result[k].n} checksum ${result[k].sum.toString(16).padStart(16, '0')}`);
  }
})();
