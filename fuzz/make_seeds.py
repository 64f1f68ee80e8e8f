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
OUT_DIR/server_request    completions and chat bodies with the glassbox extension, each padded to
                          12 lengths (the target picks the caller's role and session by length)
OUT_DIR/server_admin      sequences of admin changes (op, name, length, body records; see
                          fuzz/server_admin_fuzz.cc), a control-vector GGUF among them
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


N_EMBD, N_LAYERS = 64, 5  # stories260K, the server targets' model

REQUEST_SEEDS = [
    {'prompt': 'Once upon a time', 'max_tokens': 8, 'model': 'stories260K', 'logit_bias': {'5': -100}, 'min_p': 0.05,
     'repetition_penalty': 1.1, 'echo': False, 'best_of': 1},
    {'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}],
     'max_completion_tokens': 4, 'logprobs': True, 'top_logprobs': 2},
    {'prompt': 'x', 'max_tokens': 2, 'glassbox': {'observe': {
        'points': ['resid_post', 'mlp_act'], 'layers': {'from': 1, 'to': 3}, 'tokens': 'all', 'top_k': 2,
        'stats': ['max_abs', 'rms', 'top_k'], 'detect_massive': True,
        'capture': [{'point': 'mlp_act', 'layer': 1, 'token': 0}, {'point': 'logits', 'layer': 0, 'token': 1}]}}},
    {'prompt': [1, 2, 3], 'max_tokens': 3, 'n': 2, 'seed': 5, 'glassbox': {
        'interventions': [
            {'op': 'scale', 'point': 'mlp_act', 'layer': 2, 'dims': [5], 'strength': -0.98},
            {'op': 'add', 'point': 'resid_post', 'layers': {'from': 1, 'to': 3}, 'vector': 'v', 'strength': 2},
            {'op': 'add', 'point': 'resid_post', 'layer': 1, 'vector': [0.5] * N_EMBD, 'strength': 1},
            {'control_vector': 'v', 'strength': 0.8}, {'preset': 'p'},
            {'op': 'clamp', 'point': 'resid_post', 'layers': 'all', 'strength': 'inf'},
            {'op': 'clip_massive', 'point': 'resid_post', 'layer': 2, 'threshold': 100, 'strength': 0}],
        'massive': {'min_abs': 100, 'min_ratio': 1000},
        'stop_on_repetition': {'ngram': 4, 'window': 64, 'max_rate': 0.6}}},
    {'prompt': ['a', 'b'], 'stream': True, 'stream_options': {'include_usage': True}, 'stop': ['\n', 'end'],
     'temperature': 0.7, 'top_p': 0.9, 'top_k': 40, 'max_tokens': 5, 'logprobs': 2, 'user': 'u',
     'glassbox': {'observe': {'points': 'all', 'layers': 'all', 'tokens': 'generated'}}},
    {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'Tell a story'}]},
                  {'role': 'assistant', 'content': 'Once'}, {'role': 'user', 'content': 'more'}],
     'max_tokens': 6, 'presence_penalty': 0.5, 'frequency_penalty': 0.5, 'stream': True,
     'glassbox': {'interventions': [{'op': 'ablate', 'point': 'resid_post', 'layer': 2, 'vector': 'v',
                                     'strength': 1}], 'observe': {'tokens': 'first', 'stats': ['mean']}}},
]


def gguf_string(b):
    return struct.pack('<Q', len(b)) + b


def control_vector_gguf(layers):
    kv = gguf_string(b'general.architecture') + struct.pack('<I', 8) + gguf_string(b'controlvector')
    kv += gguf_string(b'controlvector.model_hint') + struct.pack('<I', 8) + gguf_string(b'llama')
    infos, data = b'', b''
    for layer in layers:
        infos += gguf_string(f'direction.{layer}'.encode()) + struct.pack('<IQIQ', 1, N_EMBD, 0, len(data))
        data += struct.pack(f'<{N_EMBD}f', *[0.01 * (i % 7) for i in range(N_EMBD)])
    head = struct.pack('<IIQQ', 0x46554747, 3, len(layers), 2) + kv + infos
    head += b'\0' * ((32 - len(head) % 32) % 32)
    return head + data


def admin_record(op, name, body):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return struct.pack('<BBH', op, name, len(body)) + body


def admin_seeds():
    scale = {'op': 'scale', 'point': 'mlp_act', 'layer': 2, 'dims': [5], 'strength': 0.5}
    ablate = {'op': 'ablate', 'point': 'resid_post', 'layer': 1, 'vector': 'v', 'strength': 1}
    add_v = {'op': 'add', 'point': 'resid_post', 'layer': 1, 'vector': 'v', 'strength': 2}
    policy = {'intervention_roles': ['researcher', 'admin'], 'observe_roles': ['user', 'admin'],
              'caps': {'scale': 10, 'add': 50, 'clamp': 100}, 'allowed_layers': [1, 2, 3],
              'allowed_points': ['resid_post', 'mlp_act', 'attn_out'], 'presets': {'p': [scale]},
              'max_interventions': 64}
    directions = {'directions': {str(layer): [0.25] * N_EMBD for layer in range(1, N_LAYERS)}}
    # (op, name) of fuzz/server_admin_fuzz.cc; names: 0 p, 1 q, 2 v, 3 w, 4 s, 5 locked; | 0x80: commit fails
    seeds = {
        'policy-put': [admin_record(0, 0, policy)],
        'policy-patch': [admin_record(1, 0, {'caps': {'add': None, 'scale': 5},
                                             'presets': {'q': [ablate], 'p': None}, 'allowed_layers': None})],
        'preset-put-delete': [admin_record(2, 1, {'interventions': [scale, ablate]}), admin_record(3, 1, b''),
                              admin_record(3, 0, b'')],
        'vector-json': [admin_record(4, 3, directions), admin_record(6, 2, b''), admin_record(6, 3, b'')],
        'vector-file': [admin_record(5, 3, control_vector_gguf([1, 2, 4, 9]))],
        'sessions': [admin_record(7, 4, {'interventions': [add_v, {'preset': 'p'}]}),
                     admin_record(7, 5, {'interventions': [scale], 'roles': ['researcher'], 'keys': ['k']}),
                     admin_record(8, 4, b'')],
        'default-sets': [admin_record(9, 0, {'interventions': [ablate, {'preset': 'p'}]}),
                         admin_record(9, 0, {'interventions': []}), admin_record(10, 0, b''),
                         admin_record(10, 0, b''), admin_record(10, 0, b'')],
        'commit-fails': [admin_record(0, 0x80, policy), admin_record(2, 0x81, {'interventions': [scale]}),
                         admin_record(9, 0x80, {'interventions': [ablate]}), admin_record(3, 0x80, b'')],
        'conflict': [admin_record(1, 0, {'caps': {'scale': 0.1}}), admin_record(0, 0, {'allowed_layers': [0]})],
    }
    return {k: b''.join(v) for k, v in seeds.items()}


def write_server_seeds(out):
    req_dir, admin_dir = os.path.join(out, 'server_request'), os.path.join(out, 'server_admin')
    os.makedirs(req_dir, exist_ok=True)
    os.makedirs(admin_dir, exist_ok=True)
    for i, body in enumerate(REQUEST_SEEDS):
        text = json.dumps(body)
        for pad in range(12):
            open(os.path.join(req_dir, f'request-{i}-{pad}.json'), 'w').write(text + ' ' * pad)
    for name, data in admin_seeds().items():
        open(os.path.join(admin_dir, name + '.bin'), 'wb').write(data)


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
    write_server_seeds(out)


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
