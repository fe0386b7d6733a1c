#include "kv/kv_connector.h"

#include "core/error.h"
#include "parallel/kv_migration.h"

namespace loom {

const char* kv_op_name(KvOpKind k) {
  switch (k) {
    case KvOpKind::SwapOut: return "swap-out";
    case KvOpKind::Migrate: return "migrate";
    case KvOpKind::SwapIn: return "swap-in";
    case KvOpKind::Await: return "await";
  }
  return "?";
}

void KvConnectors::add(std::unique_ptr<KvConnector> c) {
  LOOM_CHECK(c != nullptr);
  list_.push_back(std::move(c));
}

void KvConnectors::check(const std::vector<KvOp>& ops, int64_t step) const {
  for (const KvOp& op : ops) {
    // Await: every connector with copies in flight waits; a rank without one has nothing to wait for.
    if (op.seqs.empty() || op.kind == KvOpKind::Await) continue;
    bool run = false;
    for (const auto& c : list_) run = run || c->runs(op.kind);
    LOOM_CHECK(run, "step ", step, ": ", kv_op_name(op.kind), " of ", op.seqs.size(),
               " sequences, this rank has no connector for it", op.kind == KvOpKind::Migrate ? "" : " (no CPU KV tier)");
  }
}

void KvConnectors::run(const std::vector<KvOp>& ops, KvOpContext& ctx) {
  ctx.all = this;
  for (const auto& c : list_) c->begin(ops, ctx);
  for (const KvOp& op : ops) run_one(op, ctx);
}

void KvConnectors::run_one(const KvOp& op, KvOpContext& ctx) {
  ctx.all = this;
  for (const auto& c : list_)
    if (c->runs(op.kind)) c->run(op, ctx);
}

std::vector<int64_t> KvConnectors::prepare_migration(int64_t pages, KvStore& store) {
  std::vector<int64_t> held;
  for (const auto& c : list_) {
    const std::vector<int64_t> h = c->prepare_migration(pages, store);
    held.insert(held.end(), h.begin(), h.end());
  }
  return held;
}

void KvConnectors::release(int64_t seq, KvStore& store) {
  for (const auto& c : list_) c->release(seq, store);
}

void MigrationConnector::run(const KvOp& op, KvOpContext& ctx) {
  LOOM_CHECK(ctx.from && ctx.to && ctx.store && ctx.world && ctx.all, "a migration without its context");
  const KvMigration mig = kv_migration(*ctx.from, *ctx.to, op.seqs, block_size_, kv_bytes_per_token(head_dim_, DType::F32));
  KvOpsResult r;
  r.moved = true;
  r.total_bytes = mig.total_bytes;
  // Pages other connectors hold outside every placement (swap-outs still copying to the CPU tier)
  // take no part; the migration gets the free pages it needs (those connectors make room).
  const std::vector<int64_t> held = ctx.all->prepare_migration(migration_new_pages(mig, ctx.me, *ctx.store), *ctx.store);
  KvTransferOptions transfer = options_;
  transfer.all_sequences = !op.resident;
  r.transfer = execute_kv_migration(mig, *ctx.to, op.seqs, *ctx.store, *ctx.world, transfer, &scratch_, held);
  if (ctx.result) *ctx.result = r;
}

}  // namespace loom
