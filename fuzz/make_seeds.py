#!/usr/bin/env python3
"""Writes seed corpora for the file-format fuzz targets from the reference fixtures.

usage: fuzz/make_seeds.py OUT_DIR [FIXTURES_DIR]   (FIXTURES_DIR: ../shared/testdata/reference)

OUT_DIR/model_gguf        fixture GGUFs without their tokenizer.* metadata (the loader ignores it)
OUT_DIR/tokenizer_gguf    fixture GGUFs cut to header + metadata (vocabulary-only files)
OUT_DIR/core_safetensors  each fixture's safetensors header with every tensor shrunk to 2 or 2x2,
                          plus one file with every dtype, a scalar and an empty tensor
OUT_DIR/model_hf_config   config.json, and config.json NUL generation_config.json
OUT_DIR/patch_load        a mode byte + a manifest, an edit file, an adapter config, adapter weights
                          or a LoRA GGUF (fuzz/patch_load_fuzz.cc; from ../patches/qwen3-lora)
"""
import json
import os
import struct
import sys

GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
ST_SIZES = {'F32': 4, 'F16': 2, 'BF16': 2, 'I8': 1, 'I32': 4, 'I64': 8}


def gguf_parts(b):
    """(header fields, metadata entries as (key, bytes), tensor-info bytes, data start, alignment)."""
    magic, ver, n_tensors, n_kv = struct.unpack_from('<IIQQ', b, 0)

    def string_end(p):
        n, = struct.unpack_from('<Q', b, p)
        return p + 8 + n

    def value_end(t, p):
        if t in GGUF_SIZES:
            return p + GGUF_SIZES[t]
        if t == 8:
            return string_end(p)
        et, n = struct.unpack_from('<IQ', b, p)
        p += 12
        for _ in range(n):
            p = value_end(et, p)
        return p

    p, entries, align = 24, [], 32
    for _ in range(n_kv):
        start = string_end(p)
        key = b[p + 8:start]
        t, = struct.unpack_from('<I', b, start)
        end = value_end(t, start + 4)
        if key == b'general.alignment':
            align, = struct.unpack_from('<I', b, start + 4)
        entries.append((key, b[p:end]))
        p = end
    infos_start = p
    for _ in range(n_tensors):
        p = string_end(p)
        n_dims, = struct.unpack_from('<I', b, p)
        p += 4 + 8 * n_dims + 4 + 8
    data_start = (p + align - 1) // align * align
    return (magic, ver, n_tensors), entries, b[infos_start:p], data_start, align


def write_gguf_seeds(src, model_out, vocab_out):
    b = open(src, 'rb').read()
    (magic, ver, n_tensors), entries, infos, data_start, align = gguf_parts(b)
    vocab = b''.join(e for _, e in entries)
    open(vocab_out, 'wb').write(struct.pack('<IIQQ', magic, ver, 0, len(entries)) + vocab)
    kept = [e for k, e in entries if not k.startswith(b'tokenizer.')]
    head = struct.pack('<IIQQ', magic, ver, n_tensors, len(kept)) + b''.join(kept) + infos
    head += b'\0' * ((align - len(head) % align) % align)
    open(model_out, 'wb').write(head + b[data_start:])


def write_safetensors(path, header, data):
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)


def write_small_safetensors(src, out):
    b = open(src, 'rb').read()
    n, = struct.unpack_from('<Q', b, 0)
    header, small, offset = json.loads(b[8:8 + n]), {}, 0
    for name, v in header.items():
        if name == '__metadata__':
            small[name] = v
            continue
        shape = [2] * min(len(v['shape']), 2)
        nbytes = ST_SIZES[v['dtype']] * 2 ** len(shape)
        small[name] = {'dtype': v['dtype'], 'shape': shape, 'data_offsets': [offset, offset + nbytes]}
        offset += nbytes
    write_safetensors(out, small, bytes(i % 256 for i in range(offset)))


def main():
    out = sys.argv[1]
    fixtures = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), '..', '..', 'shared',
                                                                    'testdata', 'reference')
    dirs = {d: os.path.join(out, d) for d in ('model_gguf', 'tokenizer_gguf', 'core_safetensors', 'model_hf_config',
                                              'patch_load')}
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
    for m in sorted(os.listdir(fixtures)):
        ref = os.path.join(fixtures, m)
        if not os.path.isdir(os.path.join(ref, 'gguf')):
            continue
        write_gguf_seeds(os.path.join(ref, 'gguf', 'model-q4_0.gguf'), os.path.join(dirs['model_gguf'], m + '-q4_0.gguf'),
                         os.path.join(dirs['tokenizer_gguf'], m + '-vocab.gguf'))
        write_small_safetensors(os.path.join(ref, 'hf', 'model.safetensors'),
                                os.path.join(dirs['core_safetensors'], m + '-small.safetensors'))
        config = open(os.path.join(ref, 'hf', 'config.json'), 'rb').read()
        gen = open(os.path.join(ref, 'hf', 'generation_config.json'), 'rb').read()
        open(os.path.join(dirs['model_hf_config'], m + '.json'), 'wb').write(config)
        open(os.path.join(dirs['model_hf_config'], m + '-gen.json'), 'wb').write(config + b'\0' + gen)
    header, offset = {'__metadata__': {'format': 'pt', 'x': 'y'}}, 0
    for i, (dtype, size) in enumerate(ST_SIZES.items()):
        shape = [[3], [2, 2], [1, 2, 3], [], [0], [4, 1]][i]
        count = 1
        for d in shape:
            count *= d
        header[f't{i}'] = {'dtype': dtype, 'shape': shape, 'data_offsets': [offset, offset + count * size]}
        offset += count * size
    write_safetensors(os.path.join(dirs['core_safetensors'], 'all-dtypes.safetensors'), header, b'\x11' * offset)
    write_patch_seeds(dirs['patch_load'], os.path.join(fixtures, '..', 'patches', 'qwen3-lora'))


def write_patch_seeds(out, lora):
    """Seeds for patch_load_fuzz: the first byte picks what the rest replaces (see the target)."""
    def seed(name, mode, payload):
        open(os.path.join(out, name), 'wb').write(bytes([mode]) + payload)
    manifest = {'format': 'glassbox-patch', 'format_version': 1, 'name': 'fuzz', 'version': '1',
                'base_model': {'name': 'x', 'tensors': {'a.weight': '0' * 64, 'b.weight': '0' * 64}},
                'files': [{'name': 'model.safetensors', 'sha256': '0' * 64, 'header': None}],
                'edits': [{'tensor': 'a.weight', 'kind': 'columns', 'file': 'edit-0000.safetensors',
                           'sha256': '@SHA0@', 'dtype': 'f32', 'shape': [4, 6]},
                          {'tensor': 'b.weight', 'kind': 'low_rank', 'file': 'edit-0001.safetensors',
                           'sha256': '@SHA1@', 'dtype': 'f32', 'shape': [4, 6], 'rank': 2, 'scale': 2.0}]}
    seed('manifest.bin', 0, json.dumps(manifest).encode())
    edit = {'indices': {'dtype': 'I64', 'shape': [2], 'data_offsets': [0, 16]},
            'values': {'dtype': 'F32', 'shape': [4, 2], 'data_offsets': [16, 48]}}
    h = json.dumps(edit).encode()
    seed('edit.bin', 1, struct.pack('<Q', len(h)) + h + struct.pack('<2q', 1, 3) + struct.pack('<8f', *([0.5] * 8)))
    seed('config.bin', 2, open(os.path.join(lora, 'adapter', 'adapter_config.json'), 'rb').read())
    peft = {'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight':
            {'dtype': 'F32', 'shape': [2, 6], 'data_offsets': [0, 48]},
            'base_model.model.model.layers.0.mlp.down_proj.lora_B.weight':
            {'dtype': 'F32', 'shape': [4, 2], 'data_offsets': [48, 80]}}
    h = json.dumps(peft).encode()
    seed('peft.bin', 3, struct.pack('<Q', len(h)) + h + struct.pack('<20f', *([0.25] * 20)))
    seed('lora-gguf.bin', 4, open(os.path.join(lora, 'adapter.gguf'), 'rb').read())


if __name__ == '__main__':
    main()
