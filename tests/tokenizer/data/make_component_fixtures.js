// Writes components.json: small tokenizer.json configurations exercising each normalizer,
// pre-tokenizer, decoder and added-token option, with the ids and decoded text that Hugging
// Face tokenizers (npm `tokenizers` 0.23.2, Rust) produces. Regenerate with
//   NODE_PATH=tools/node/node_modules node tests/tokenizer/data/make_component_fixtures.js
// The vocabulary is every single character of the inputs plus every pair over a small
// alphabet, with a merge per pair, so a pre-tokenizer boundary shows up as two tokens where
// one would otherwise have been merged.
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const SP = '\u2581';
const core = ['a', 'b', '1', '2', SP, ' ', '-', 'x'];

function makeModel(texts, extraChars, opts = {}) {
  const chars = new Set([...core, ...extraChars]);
  for (const t of texts) for (const c of t) chars.add(c);
  for (const t of texts) for (const c of t.normalize('NFKC').toLowerCase()) chars.add(c);
  const vocab = { '<unk>': 0 };
  let next = 1;
  for (const c of [...chars].sort()) if (!(c in vocab)) vocab[c] = next++;
  const merges = [];
  for (const x of core) for (const y of core) {
    if (opts.noSpaceMerges && (x === ' ' || y === ' ')) continue;
    const xy = x + y;
    if (!(xy in vocab)) vocab[xy] = next++;
    merges.push(x + ' ' + y);
  }
  return { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: true, byte_fallback: false, ignore_merges: false,
           vocab, merges: merges.map((m) => m.split(' ').length === 2 ? m : null).filter(Boolean) };
}

// Merges written as [a, b] pairs: "a  " style strings cannot carry a space token.
function pairMerges(model) {
  const out = [];
  for (const x of core) for (const y of core) out.push([x, y]);
  model.merges = out;
  return model;
}

const texts = ['ab ab', ' ab-12 ab', 'a1b2 12ab', 'xa  b', 'ABab 12', '\uFF21\uFF22 ab', '  ab  ', 'a-b--ab', ''];

function base(model) {
  return { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
           pre_tokenizer: null, post_processor: null, decoder: null, model };
}

const configs = [];
function add(name, mutate, inputs = texts) {
  const t = base(pairMerges(makeModel(inputs, [])));
  mutate(t);
  configs.push({ name, tokenizer: t, inputs });
}

for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  add(`split_string_${behavior}`, (t) => {
    t.pre_tokenizer = { type: 'Split', pattern: { String: ' ' }, behavior, invert: false };
  });
  add(`split_regex_${behavior}`, (t) => {
    t.pre_tokenizer = { type: 'Split', pattern: { Regex: '-+|\\d' }, behavior, invert: false };
  });
}
add('split_invert', (t) => {
  t.pre_tokenizer = { type: 'Split', pattern: { Regex: '[ab]+' }, behavior: 'Isolated', invert: true };
});
add('digits_individual', (t) => { t.pre_tokenizer = { type: 'Digits', individual_digits: true }; });
add('digits_grouped', (t) => { t.pre_tokenizer = { type: 'Digits', individual_digits: false }; });
add('whitespace_split', (t) => { t.pre_tokenizer = { type: 'WhitespaceSplit' }; });
for (const scheme of ['always', 'first', 'never']) {
  for (const split of [true, false]) {
    add(`metaspace_${scheme}_${split ? 'split' : 'nosplit'}`, (t) => {
      t.pre_tokenizer = { type: 'Metaspace', replacement: SP, prepend_scheme: scheme, split };
      t.decoder = { type: 'Metaspace', replacement: SP, prepend_scheme: scheme, split };
      t.added_tokens = [{ id: 0, content: '<unk>', single_word: false, lstrip: false, rstrip: false,
                          normalized: false, special: true }];
    }, texts.concat(['ab<unk> ab', '<unk>ab']));
  }
}
add('normalizers', (t) => {
  t.normalizer = { type: 'Sequence', normalizers: [
    { type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Strip', strip_left: true, strip_right: true },
    { type: 'Replace', pattern: { Regex: '-+' }, content: 'x' }, { type: 'Prepend', prepend: SP }] };
  t.decoder = { type: 'Sequence', decoders: [
    { type: 'Replace', pattern: { String: SP }, content: ' ' }, { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
});
add('nfd_nfc', (t) => {
  t.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'NFC' }] };
}, ['e\u0301a', '\u00e9a b']);
add('added_tokens', (t) => {
  const v = t.model.vocab;
  let next = Object.keys(v).length + 10;
  const tok = (content, o) => Object.assign({ id: next++, content, single_word: false, lstrip: false,
                                               rstrip: false, normalized: false, special: false }, o);
  // The ids written here are deliberately not the next free ones: HF ignores them and gives an
  // added token its model id, or the next id after the vocabulary (80, 81, ...).
  t.added_tokens = [tok('[L]', { lstrip: true, special: true }), tok('[R]', { rstrip: true, special: true }),
                    tok('ab', { single_word: true }), tok('xx', { normalized: true }),
                    tok('[LR]', { lstrip: true, rstrip: true, special: true })];
  t.normalizer = { type: 'Lowercase' };
  t.pre_tokenizer = { type: 'Split', pattern: { String: ' ' }, behavior: 'Isolated', invert: false };
  t.post_processor = { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '[L]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
             { SpecialToken: { id: '[R]', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '[L]': { id: '[L]', ids: [80], tokens: ['[L]'] },
                      '[R]': { id: '[R]', ids: [81], tokens: ['[R]'] } } };
}, ['a [L] b', 'a   [L]b', 'a [R]   b', 'ab abab xab ab', 'XX a xx', 'a  [LR]  b', 'ab[L]ab', '[R][R]']);
add('byte_level', (t) => {
  // A byte-level vocabulary: the 256 byte symbols plus pairs over them.
  const alphabet = require('tokenizers').byteLevelAlphabet();
  const vocab = {};
  alphabet.sort().forEach((c, i) => { vocab[c] = i; });
  const coreB = ['a', 'b', '1', '\u0120', 'x', '\u00c3', '\u00a9'];
  const merges = [];
  for (const x of coreB) for (const y of coreB) {
    if (!((x + y) in vocab)) vocab[x + y] = Object.keys(vocab).length;
    merges.push(x + ' ' + y);
  }
  t.model = { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
              end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges };
  t.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  t.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
}, ['ab ab', 'x1 11 ab', '\u00e9a b\u00e9', ' ab', '日本 ab', '']);
add('byte_fallback', (t) => {
  t.model.byte_fallback = true;
  for (let b = 0; b < 256; ++b) {
    t.model.vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = Object.keys(t.model.vocab).length;
  }
  t.normalizer = { type: 'Replace', pattern: { String: ' ' }, content: SP };
  t.decoder = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: SP }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }] };
}, ['ab é 日本 ab', '🎉x', 'a\u00ffb']);

(async () => {
  const out = [];
  for (const c of configs) {
    const tk = Tokenizer.fromString(JSON.stringify(c.tokenizer));
    const cases = [];
    for (const text of c.inputs) {
      for (const addSpecial of [false, true]) {
        const e = await tk.encode(text, null, { addSpecialTokens: addSpecial });
        const ids = e.getIds();
        cases.push({ text, add_special: addSpecial, ids, decoded: await tk.decode(ids, false),
                     decoded_skip: await tk.decode(ids, true) });
      }
    }
    out.push({ name: c.name, tokenizer: c.tokenizer, cases });
  }
  fs.writeFileSync(path.join(__dirname, 'components.json'), JSON.stringify(out) + '\n');
  console.log(`${out.length} configurations written`);
})();
