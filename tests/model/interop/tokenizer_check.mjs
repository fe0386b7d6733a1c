// Loads the tokenizer.json that `loom synth --format safetensors` wrote into DIR with Hugging
// Face's tokenizers (the npm binding of the Rust library, an independent implementation) and
// checks that it encodes a fixed list of texts to the ids `loom tokenize` prints, with and
// without special tokens (BOS), and that it decodes loom's ids back to the text.
//   node tokenizer_check.mjs DIR LOOM_BIN
// Exit 0 on success, 1 with a message naming the first text that differs.
import { createRequire } from "module";
import { execFileSync } from "child_process";
const require = createRequire(process.env.LOOM_NODE_DIR + "/");
const { Tokenizer } = require("tokenizers");

const [dir, loom] = process.argv.slice(2);
const fail = (msg) => { console.error(`FAIL (${dir}): ` + msg); process.exit(1); };

// Spaces (leading, runs, trailing), newlines, tabs, digits, punctuation, code points the
// small vocabularies lack (byte fallback / byte-level), special-token text mid-string.
const texts = [
  "Once upon a time, there was a little girl named Lily.",
  "hello",
  " leading space",
  "two  spaces and trailing ",
  "   ",
  "line one\nline two\n\nend",
  "tabs\tand\r\nCRLF",
  "The total was 42.50 dollars, or about 39 euros; 12345678.",
  "What's the weather like today? It's sunny! We're going.",
  "café naïve Ελληνικά русский 日本語 😀🌍",
  "def count_words(text):\n    return len(text.split())",
  "a</s>b <s> c",
  "x",
];

const tok = Tokenizer.fromFile(`${dir}/tokenizer.json`);
const loomIds = (text, bos) => {
  const args = ["tokenize", "--model", dir, "--text", text];
  if (!bos) args.push("--no-bos");
  return JSON.parse(execFileSync(loom, args, { encoding: "utf8" }));
};
let n = 0;
for (const text of texts) {
  // Special-token text is only matched when its token is in this vocabulary's added tokens,
  // and the same holds for loom, so every text is compared.
  for (const bos of [true, false]) {
    const hf = (await tok.encode(text, null, { addSpecialTokens: bos })).getIds();
    const ours = loomIds(text, bos);
    if (JSON.stringify(hf) !== JSON.stringify(ours))
      fail(`${JSON.stringify(text)} (special tokens ${bos}): tokenizers ${JSON.stringify(hf)}, loom ${JSON.stringify(ours)}`);
    ++n;
  }
  const back = await tok.decode(loomIds(text, false), false);
  if (back !== text && !text.includes("<s>") && !text.includes("</s>"))
    fail(`decode of loom's ids of ${JSON.stringify(text)} gives ${JSON.stringify(back)}`);
}
console.log(`ok: ${dir}: ${n} encodings identical (vocab ${tok.getVocabSize(true)})`);
