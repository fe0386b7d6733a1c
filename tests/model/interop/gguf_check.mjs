// Opens a GGUF file written by `loom synth` with Hugging Face's GGUF parser (an independent
// implementation of the spec) and checks what it reads against the shape the file should hold:
//   node gguf_check.mjs FILE ARCH d_model layers heads kv_heads ffn vocab ctx tied(0|1) bias(0|1) DTYPE
// DTYPE is the matrices' type name (F32, F16, BF16, Q8_0). Exit 0 on success, 1 with a message.
import { createRequire } from "module";
const require = createRequire(process.env.LOOM_NODE_DIR + "/");
const { gguf, GGMLQuantizationType } = require("@huggingface/gguf");

const [file, arch, d, L, H, K, F, V, ctx, tied, bias, dtype] = process.argv.slice(2);
const n = (s) => Number(s);
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };
const eq = (what, got, want) => { if (got !== want) fail(`${what}: got ${got}, want ${want}`); };

const r = await gguf(file, { allowLocalFile: true, computeParametersCount: true });
const m = r.metadata;
eq("version", Number(m.version), 3);
eq("general.architecture", m["general.architecture"], arch);
eq(`${arch}.embedding_length`, Number(m[`${arch}.embedding_length`]), n(d));
eq(`${arch}.block_count`, Number(m[`${arch}.block_count`]), n(L));
eq(`${arch}.attention.head_count`, Number(m[`${arch}.attention.head_count`]), n(H));
eq(`${arch}.attention.head_count_kv`, Number(m[`${arch}.attention.head_count_kv`]), n(K));
eq(`${arch}.feed_forward_length`, Number(m[`${arch}.feed_forward_length`]), n(F));
eq(`${arch}.context_length`, Number(m[`${arch}.context_length`]), n(ctx));
eq("tokenizer.ggml.tokens length", m["tokenizer.ggml.tokens"].length, n(V));

// Every tensor the llama layout needs, with GGUF's innermost-first dims.
const hd = n(d) / n(H);
const want = new Map();
want.set("token_embd.weight", [n(d), n(V)]);
want.set("output_norm.weight", [n(d)]);
if (tied === "0") want.set("output.weight", [n(d), n(V)]);
for (let l = 0; l < n(L); ++l) {
  const p = `blk.${l}.`;
  want.set(p + "attn_norm.weight", [n(d)]);
  want.set(p + "attn_q.weight", [n(d), n(H) * hd]);
  want.set(p + "attn_k.weight", [n(d), n(K) * hd]);
  want.set(p + "attn_v.weight", [n(d), n(K) * hd]);
  want.set(p + "attn_output.weight", [n(H) * hd, n(d)]);
  want.set(p + "ffn_norm.weight", [n(d)]);
  want.set(p + "ffn_gate.weight", [n(d), n(F)]);
  want.set(p + "ffn_up.weight", [n(d), n(F)]);
  want.set(p + "ffn_down.weight", [n(F), n(d)]);
  if (bias === "1") {
    want.set(p + "attn_q.bias", [n(H) * hd]);
    want.set(p + "attn_k.bias", [n(K) * hd]);
    want.set(p + "attn_v.bias", [n(K) * hd]);
  }
}
const seen = new Set();
let params = 0;
for (const t of r.tensorInfos) {
  if (t.name === "rope_freqs.weight") continue;  // Llama-3 scaling, optional
  const shape = t.shape.map(Number);
  if (!want.has(t.name)) fail(`unexpected tensor ${t.name}`);
  eq(`${t.name} shape`, JSON.stringify(shape), JSON.stringify(want.get(t.name)));
  const isMatrix = shape.length === 2;
  eq(`${t.name} type`, GGMLQuantizationType[t.dtype], isMatrix ? dtype : "F32");
  seen.add(t.name);
  params += shape.reduce((a, b) => a * b, 1);
}
for (const name of want.keys()) if (!seen.has(name)) fail(`missing tensor ${name}`);
console.log(`ok: ${file}: ${r.tensorInfos.length} tensors, ${params} parameters, ${Object.keys(m).length} metadata keys`);
