#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz harnesses (tests/fuzz/README.md).

Usage: make_corpus.py LOOM_BINARY OUT_DIR   (OUT_DIR is normally tests/fuzz/corpus)

Every seed is synthetic: GGUF, safetensors, config.json and tokenizer.json come from
`loom synth` on a tiny shape (seeded random weights, a few KB to tens of KB); llama2.c files, step
descriptors and request bodies are written here from their documented layouts
(src/model/llama2c.h, src/engine/step_codec.h, src/server/openai_api.h). Nothing is copied from
../shared. Existing seed-* files are replaced; regress-* files (past findings) are kept.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

# d=32 with one KV head: small enough that a seed is a few KB, big enough for every loader path
# (GQA, q8_0 blocks of 32). The safetensors harness's fixed config.json is this shape.
DIMS = "d=32,layers=1,heads=2,kv_heads=1,head_dim=16,ffn=64,vocab=300,ctx=64"


def synth(loom, out, fmt, dtype, extra=""):
    cmd = [loom, "synth", "--dims", DIMS + extra, "--dtype", dtype, "--format", fmt, "-o", out, "--seed", "3"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def put(out, harness, name, data):
    d = os.path.join(out, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def llama2c_checkpoint(rng, dim, hidden, layers, heads, kv_heads, vocab, seq_len, shared=True):
    head = dim // heads
    kv = dim * kv_heads // heads
    counts = [vocab * dim, layers * dim, layers * dim * dim, layers * kv * dim, layers * kv * dim,
              layers * dim * dim, layers * dim, layers * hidden * dim, layers * dim * hidden,
              layers * hidden * dim, dim, seq_len * head // 2, seq_len * head // 2]
    if not shared:
        counts.append(vocab * dim)
    n = sum(counts)
    header = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab if shared else -vocab, seq_len)
    return header + struct.pack("<%df" % n, *[rng.uniform(-0.5, 0.5) for _ in range(n)])


def llama2c_tokenizer(vocab):
    pieces = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % i for i in range(8)]
    words = [b" a", b" b", b"ab", b" the", b"the", b"e", b"t", b"h", b" ", b"Once", b" upon"]
    pieces += words
    pieces = pieces[:vocab] + [b"x%d" % i for i in range(max(0, vocab - len(pieces)))]
    out = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        out += struct.pack("<fi", -float(i), len(p)) + p
    return out


def step(seqs, released=(), kv=(), step_index=7, block_size=16, plan_id=0, cmd=1, resident=0, swap_out=(),
         swap_in=()):
    # src/engine/step_codec.cpp, version 4: kv_resident byte, then the KV, swap-out and swap-in
    # extent lists, then the sequences (flags 1 prefill, 2 sample; 4 and 8 add fields, unused here).
    b = struct.pack("<III", 0x5054534C, 4, cmd)
    if cmd != 1:
        return b
    b += struct.pack("<qii", step_index, block_size, plan_id)
    b += struct.pack("<I", len(released)) + b"".join(struct.pack("<q", r) for r in released)
    b += struct.pack("<B", resident)
    for extents in (kv, swap_out, swap_in):
        b += struct.pack("<I", len(extents)) + b"".join(struct.pack("<qq", i, n) for i, n in extents)
    b += struct.pack("<I", len(seqs))
    for seq_id, start, tokens, flags in seqs:
        b += struct.pack("<qiiBffiQi", seq_id, start, len(tokens), flags, 0.7, 0.9, 40, 1234, 0)
        b += struct.pack("<%di" % len(tokens), *tokens)
    return b


REQUESTS = [
    (0, {"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
         "stop": ["\n", "."], "stream": True, "stream_options": {"include_usage": True}, "seed": 1}),
    (0, {"prompt": [1, 2, 3], "max_tokens": 4, "top_k": -1, "n": 1, "ignore_eos": True, "priority": -2,
         "slo": {"ttft_ms": 250, "tpot_ms": 20}}),
    (0, {"prompt": [[5, 6]], "logprobs": 0, "best_of": 1, "echo": False}),
    (1, {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
         "max_completion_tokens": 8, "temperature": 0}),
    (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                      {"role": "assistant"}, {"role": "developer", "content": "x"}], "stop": "END"}),
]


def main():
    loom, out = sys.argv[1], sys.argv[2]
    rng = random.Random(19)
    for h in os.listdir(out) if os.path.isdir(out) else []:
        for f in os.listdir(os.path.join(out, h)):
            if f.startswith("seed-"):
                os.remove(os.path.join(out, h, f))
    tmp = tempfile.mkdtemp()
    try:
        for dtype, tok in [("f32", "spm"), ("q8_0", "gpt2"), ("f16", "llama3")]:
            p = os.path.join(tmp, "m-%s-%s.gguf" % (dtype, tok))
            synth(loom, p, "gguf", dtype, ",tok=" + tok + (",tied=0" if dtype == "q8_0" else ""))
            put(out, "gguf", "%s-%s.gguf" % (dtype, tok), read(p))
        for dtype, tok, arch in [("bf16", "spm", "llama"), ("f16", "qwen2", "qwen2")]:
            d = os.path.join(tmp, "st-%s-%s" % (dtype, tok))
            synth(loom, d, "safetensors", dtype, ",tok=%s,arch=%s" % (tok, arch))
            if arch == "llama":  # the harness's fixed config.json is this shape (llama, tied)
                put(out, "safetensors", "%s.safetensors" % dtype, read(os.path.join(d, "model.safetensors")))
            put(out, "hf_config", "%s.json" % arch, read(os.path.join(d, "config.json")))
            tj = read(os.path.join(d, "tokenizer.json"))
            put(out, "tokenizer_json", "%s.json" % tok, tj)
            put(out, "tokenizer_json", "%s-with-config.json" % tok,
                tj + b"\0" + read(os.path.join(d, "tokenizer_config.json")))
        cfg = json.loads(read(os.path.join(tmp, "st-bf16-spm", "config.json")))
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        cfg["eos_token_id"] = [2, 3]
        put(out, "hf_config", "llama3-scaling.json", json.dumps(cfg).encode())
        for t in ["gpt2", "llama3"]:
            d = os.path.join(tmp, "st-tok-" + t)
            synth(loom, d, "safetensors", "f32", ",tok=" + t)
            put(out, "tokenizer_json", "%s.json" % t, read(os.path.join(d, "tokenizer.json")))
        put(out, "llama2c", "shared.bin", llama2c_checkpoint(rng, 8, 16, 1, 2, 2, 16, 4))
        put(out, "llama2c", "gqa-unshared.bin", llama2c_checkpoint(rng, 8, 16, 2, 2, 1, 12, 4, shared=False))
        for v in [16, 40]:
            put(out, "llama2c_tokenizer", "vocab%d.bin" % v, struct.pack("<H", v - 1) + llama2c_tokenizer(v))
        put(out, "step_codec", "stop.bin", step([], cmd=2))
        put(out, "step_codec", "prefill-decode.bin",
            step([(3, 0, [1, 2, 3, 4], 3), (4, 9, [7], 2)], released=[1, 2], kv=[(3, 0), (4, 9)]))
        put(out, "step_codec", "chunk.bin", step([(9, 16, list(range(16)), 1)], plan_id=1))
        put(out, "step_codec", "seesaw-swaps.bin",
            step([(5, 40, [11], 2)], plan_id=1, resident=1, swap_out=[(6, 33)], swap_in=[(5, 40), (7, 8)]))
        for i, (ep, body) in enumerate(REQUESTS):
            put(out, "openai_request", "%d.json" % i, bytes([ep]) + json.dumps(body).encode())
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
