// The official openai npm client against `loom serve` on 127.0.0.1 (a free port): models,
// completion, chat, streaming (completion and chat, with usage), and errors (400, 404).
// Environment: LOOM_BIN (the loom executable), LOOM_NODE_DIR (where setup.sh installed openai),
// LOOM_WORK_DIR (scratch). Exits 77 (ctest: skipped) when the package is not installed.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const loom = process.env.LOOM_BIN;
const nodeDir = process.env.LOOM_NODE_DIR;
const work = process.env.LOOM_WORK_DIR;
assert.ok(loom && nodeDir && work, 'LOOM_BIN, LOOM_NODE_DIR and LOOM_WORK_DIR must be set');

let OpenAI;
try {
  const require = createRequire(path.join(path.resolve(nodeDir), 'package.json'));
  const mod = require('openai');
  OpenAI = mod.OpenAI ?? mod.default ?? mod;
} catch (e) {
  console.log(`SKIP: the openai npm package is not installed in ${nodeDir} ` +
              `(server_node_setup installs it; npm could not reach the registry?): ${e.message}`);
  process.exit(77);
}

fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
const model = path.join(work, 'tiny.gguf');
execFileSync(loom, ['synth', '--shape', 'tiny', '--dtype', 'f32', '-o', model]);

const server = spawn(loom, ['serve', '-m', model, '--port', '0', '--threads', '1', '--served-model-name', 'tiny'],
                     { stdio: ['ignore', 'pipe', 'pipe'] });
let log = '';
server.stderr.on('data', (d) => { log += d; });
const baseURL = await new Promise((resolve, reject) => {
  let out = '';
  const timer = setTimeout(() => reject(new Error(`no listening line from loom serve: ${out} ${log}`)), 20000);
  server.stdout.on('data', (d) => {
    out += d;
    const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
    if (m) {
      clearTimeout(timer);
      resolve(`${m[1]}/v1`);
    }
  });
  server.on('exit', (code) => reject(new Error(`loom serve exited with ${code}: ${out} ${log}`)));
});

const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 30000 });
let failed = false;
try {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['tiny']);

  const c = await client.completions.create({
    model: 'tiny', prompt: 'Hello', max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  assert.equal(typeof c.choices[0].text, 'string');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 8);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + 8);

  const chat = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    max_completion_tokens: 6, temperature: 0, ignore_eos: true,
  });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.equal(typeof chat.choices[0].message.content, 'string');
  assert.equal(chat.usage.completion_tokens, 6);

  // Streaming gives the same greedy text, then usage.
  const stream = await client.completions.create({
    model: 'tiny', prompt: 'Hello', max_tokens: 8, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(chunks >= 2, `only ${chunks} chunks`);
  assert.equal(text, c.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 8);

  const chatStream = await client.chat.completions.create({
    model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    max_tokens: 6, temperature: 0, ignore_eos: true, stream: true,
  });
  let chatText = '';
  let role = null;
  for await (const chunk of chatStream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.role) role = d.role;
    if (d.content) chatText += d.content;
  }
  assert.equal(role, 'assistant');
  assert.equal(chatText, chat.choices[0].message.content);

  // Errors come back as the SDK's typed errors with OpenAI's fields.
  await assert.rejects(
    client.completions.create({ model: 'tiny', prompt: 'Hi', top_p: 2 }),
    (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.type ?? e.error?.type, 'invalid_request_error');
      assert.equal(e.param ?? e.error?.param, 'top_p');
      return true;
    });
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-nonexistent', messages: [{ role: 'user', content: 'x' }] }),
    (e) => {
      assert.equal(e.status, 404);
      assert.equal(e.code ?? e.error?.code, 'model_not_found');
      return true;
    });
  console.log('openai client tests passed');
} catch (e) {
  failed = true;
  console.error(e);
  console.error(log);
} finally {
  server.kill('SIGTERM');
}
process.exit(failed ? 1 : 0);
