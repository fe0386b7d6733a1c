#include "cluster/pool.h"

#include "gpu/device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "comm/byte_message.h"
#include "comm/world.h"
#include "core/byte_io.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse_number.h"
#include "core/thread_pool.h"
#include "engine/plan_executor.h"
#include "engine/step_codec.h"
#include "kv/block_allocator.h"
#include "kv/kv_transfer.h"
#include "model/loader.h"
#include "parallel/kv_migration.h"
#include "parallel/plan_set.h"

namespace loom::cluster {

namespace {

// ---------------------------------------------------------------------------------------------
// Pool commands on C_G (beside the step descriptors of step_codec.h, told apart by the magic).
// Fixed-width host-order fields (every rank runs the same binary):
//   u32 magic 'LPOL', u32 version, u32 kind (1 keep-alive, 2 command),
//   u32 n_drops, (i32 group, i64 seq)[n],
//   u32 n_migrations, per migration: u8 all_sequences, from parts, to parts (u32 n, per part:
//     i32 group, u32 n_seqs, i64 seq[n_seqs]), u32 n_extents, (i64 id, i64 n_tokens)[n],
//   u32 n_assignment, i32 group[n] (per pool rank, the group it serves afterwards).
// Reply of a command (the first rank of each group it was sent to, tag kTagReply): u64 bytes, then
//   f64 seconds, u32 n, (u32 migration, i64 total bytes, f64 seconds)[n].
// Tokens of a step (the group's first rank, tag kTagTokens): u64 n, SampledToken[n].

constexpr uint32_t kPoolMagic = 0x4c4f504c;  // "LPOL"
constexpr uint32_t kPoolVersion = 1;
constexpr int kTagTokens = 1, kTagReply = 2;

struct MigrationPart {
  int group = 0;
  std::vector<int64_t> seqs;
};
struct MigrationCmd {
  bool all_sequences = true;
  std::vector<MigrationPart> from, to;
  std::vector<SeqExtent> extents;
};
struct PoolCommand {
  bool keepalive = false;
  std::vector<std::pair<int, int64_t>> drops;  // (group, sequence): the group's ranks drop its K/V
  std::vector<MigrationCmd> migrations;
  std::vector<int32_t> assignment;  // per pool rank; empty: unchanged
};
struct MigrationDone {
  uint32_t index = 0;
  int64_t bytes = 0;
  double seconds = 0;
};
struct CommandReply {
  double seconds = 0;
  std::vector<MigrationDone> migrations;
};

// A count of `elem_bytes`-sized items that must fit what is left of the message.
uint32_t get_count(ByteReader& r, const char* what, std::size_t elem_bytes) {
  const uint32_t n = r.get<uint32_t>(what);
  if (uint64_t(n) * elem_bytes > r.left()) fail("pool command: ", what, " = ", n, " runs past the end");
  return n;
}

void encode_parts(ByteWriter& w, const std::vector<MigrationPart>& parts) {
  w.put(uint32_t(parts.size()));
  for (const MigrationPart& p : parts) {
    w.put(int32_t(p.group));
    w.put(uint32_t(p.seqs.size()));
    for (int64_t id : p.seqs) w.put(id);
  }
}

std::vector<uint8_t> encode_command(const PoolCommand& c) {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.put(kPoolMagic);
  w.put(kPoolVersion);
  w.put(uint32_t(c.keepalive ? 1 : 2));
  w.put(uint32_t(c.drops.size()));
  for (const auto& [g, id] : c.drops) {
    w.put(int32_t(g));
    w.put(int64_t(id));
  }
  w.put(uint32_t(c.migrations.size()));
  for (const MigrationCmd& m : c.migrations) {
    w.put(uint8_t(m.all_sequences ? 1 : 0));
    encode_parts(w, m.from);
    encode_parts(w, m.to);
    w.put(uint32_t(m.extents.size()));
    for (const SeqExtent& e : m.extents) {
      w.put(e.id);
      w.put(e.n_tokens);
    }
  }
  w.put(uint32_t(c.assignment.size()));
  for (int32_t g : c.assignment) w.put(g);
  return out;
}

std::vector<MigrationPart> decode_parts(ByteReader& r) {
  std::vector<MigrationPart> parts(get_count(r, "parts", 8));
  for (MigrationPart& p : parts) {
    p.group = r.get<int32_t>("part group");
    p.seqs.resize(get_count(r, "part sequences", 8));
    for (int64_t& id : p.seqs) id = r.get<int64_t>("part sequence");
  }
  return parts;
}

PoolCommand decode_command(const std::vector<uint8_t>& b) {
  ByteReader r(b.data(), b.size(), "pool command");
  if (r.get<uint32_t>("magic") != kPoolMagic) fail("not a pool command");
  const uint32_t version = r.get<uint32_t>("version");
  if (version != kPoolVersion) fail("pool command version ", version, ", this binary speaks ", kPoolVersion);
  PoolCommand c;
  c.keepalive = r.get<uint32_t>("kind") == 1;
  c.drops.resize(get_count(r, "drops", 12));
  for (auto& [g, id] : c.drops) {
    g = r.get<int32_t>("drop group");
    id = r.get<int64_t>("drop sequence");
  }
  c.migrations.resize(get_count(r, "migrations", 13));
  for (MigrationCmd& m : c.migrations) {
    m.all_sequences = r.get<uint8_t>("all_sequences") != 0;
    m.from = decode_parts(r);
    m.to = decode_parts(r);
    m.extents.resize(get_count(r, "extents", 16));
    for (SeqExtent& e : m.extents) {
      e.id = r.get<int64_t>("extent id");
      e.n_tokens = r.get<int64_t>("extent tokens");
    }
  }
  c.assignment.resize(get_count(r, "assignment", 4));
  for (int32_t& g : c.assignment) g = r.get<int32_t>("assignment");
  return c;
}

bool is_pool_command(const std::vector<uint8_t>& b) {
  uint32_t magic = 0;
  if (b.size() >= sizeof magic) std::memcpy(&magic, b.data(), sizeof magic);
  return magic == kPoolMagic;
}


// Tokens and logprobs (step_codec.h).
std::vector<uint8_t> encode_tokens(const StepResult& r) { return encode_sampled(r); }
StepResult decode_tokens(const std::vector<uint8_t>& b) { return decode_sampled(b.data(), b.size()); }

std::vector<uint8_t> encode_reply(const CommandReply& c) {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.put(c.seconds);
  w.put(uint32_t(c.migrations.size()));
  for (const MigrationDone& m : c.migrations) {
    w.put(m.index);
    w.put(m.bytes);
    w.put(m.seconds);
  }
  return out;
}
CommandReply decode_reply(const std::vector<uint8_t>& b) {
  ByteReader r(b.data(), b.size(), "pool command reply");
  CommandReply c;
  c.seconds = r.get<double>("seconds");
  c.migrations.resize(get_count(r, "migrations", 20));
  for (MigrationDone& m : c.migrations) {
    m.index = r.get<uint32_t>("migration");
    m.bytes = r.get<int64_t>("bytes");
    m.seconds = r.get<double>("seconds");
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// What every world rank knows after set-up.

struct Common {
  int n = 0;  // pool ranks
  std::shared_ptr<const Model> model;
  ModelShape shape;
  EngineConfig config;  // resolved (max_model_len set)
  SloTiers tiers;
  std::vector<int> degrees;
  std::vector<RankGroup> groups;
  std::vector<int64_t> pages;  // per pool rank

  int group_of(int first, int tp) const {
    for (size_t g = 0; g < groups.size(); ++g)
      if (groups[g].first_rank == first && groups[g].tp == tp) return int(g);
    fail("no candidate group tp", tp, "@", first);
  }
  std::vector<int> ranks_of(int g) const {
    std::vector<int> r;
    for (int i = 0; i < groups[size_t(g)].tp; ++i) r.push_back(groups[size_t(g)].first_rank + i);
    return r;
  }
  std::string group_name(int g) const { return cat("tp", groups[size_t(g)].tp, "@", groups[size_t(g)].first_rank); }
};

Plan group_plan(int tp) { return Plan::parse(cat("tp=", tp, ",weights=full")); }

std::string layout_string(const std::vector<InstanceSpec>& v) {
  std::string s;
  for (const InstanceSpec& x : v) {
    std::string t = x.to_string();
    if (x.first_rank < 0) t = t.substr(0, t.rfind('@'));  // not placed yet
    s += cat(s.empty() ? "" : " ", t);
  }
  return s;
}

// Spare instances (Both, the smallest degree, tier `tier`) on every aligned slot no instance
// covers; LOOM_CHECK that the pool is covered afterwards.
void fill_spares(std::vector<InstanceSpec>* v, int n, int min_tp, int tier) {
  std::vector<char> used(size_t(n), 0);
  for (const InstanceSpec& x : *v)
    for (int r = x.first_rank; r < x.first_rank + x.tp; ++r) used[size_t(r)] = 1;
  for (int r = 0; r + min_tp <= n; r += min_tp) {
    bool free = true;
    for (int k = r; k < r + min_tp; ++k) free = free && !used[size_t(k)];
    if (!free) continue;
    v->push_back({tier, Role::Both, min_tp, r});
    for (int k = r; k < r + min_tp; ++k) used[size_t(k)] = 1;
  }
  for (int r = 0; r < n; ++r) LOOM_CHECK(used[size_t(r)], "pool rank ", r, " serves no instance of ", layout_string(*v));
}

std::vector<InstanceSpec> placed_layout(std::vector<InstanceSpec> v, int n) {
  if (!place_instances(&v, n)) fail("pool layout ", layout_string(v), " does not fit ", n, " ranks on aligned groups");
  return v;
}

std::string describe_options(const PoolOptions& o) {
  std::string s = cat("ranks=", o.ranks, " tp=", o.min_tp, "..", o.max_tp, " window=", o.window_s,
                      " tiers=", o.tiers.size() ? o.tiers.to_string() : std::string("default"), " layouts=");
  for (const auto& l : o.layouts) s += layout_string(l) + ";";
  return s;
}

// The largest candidate TP degree: --max-tp, else the largest power of two in the pool.
int max_degree(const PoolOptions& o) {
  if (o.max_tp > 0) return o.max_tp;
  int t = 1;
  while (t * 2 <= o.ranks) t *= 2;
  return std::max(t, o.min_tp);
}

int queue_priority(QueueKind q, int client) {
  // The queue kind first (feasible, best-effort, background: Nitsum 3.3.2), the client's own
  // priority inside it.
  const int c = std::clamp(client, -(1 << 22), (1 << 22) - 1);
  return int(q) * (1 << 23) + c;
}

// ---------------------------------------------------------------------------------------------
// A pool rank.

class Worker {
 public:
  Worker(const PoolOptions& o, Common& c, int p) : o_(o), c_(c), p_(p) {}

  std::map<int, std::unique_ptr<Communicator>> tp, cmd;        // by member group
  std::map<std::vector<int>, Communicator*> by_ranks;            // a migration's group by its pool ranks
  std::vector<std::unique_ptr<Communicator>> pair_comms;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Device> dev;  // before the store and the engines, whose memory lives on it
  std::shared_ptr<KvStore> kv;
  std::map<int, std::unique_ptr<RankEngine>> engines;           // by member group
  std::map<int, KvPlacement> placements;                        // tp=T by degree
  KvTransferOptions transfer;
  int listening = -1;

  void run() {
    std::vector<uint8_t> wire, inl;
    for (;;) {
      Communicator& ch = *cmd.at(listening);
      broadcast_descriptor(ch, wire, inl);
      if (is_pool_command(wire)) {
        const PoolCommand c = decode_command(wire);
        if (c.keepalive) continue;
        const CommandReply reply = execute(c);
        if (ch.rank() == 1) send_message(ch, 0, kTagReply, encode_reply(reply));
        if (!c.assignment.empty()) listening = c.assignment.at(size_t(p_));
        continue;
      }
      const DecodedStep d = decode_step(wire.data(), wire.size());
      if (d.command == StepCommand::kStop) break;
      RankEngine& e = *engines.at(listening);
      const StepResult r = e.step(d.batch, d.released);
      if (o_.after_step) o_.after_step(p_, e, d.batch);
      if (ch.rank() == 1) send_message(ch, 0, kTagTokens, encode_tokens(r));
    }
    if (o_.on_exit) o_.on_exit(p_, *kv);
  }

 private:
  bool member(int g) const {
    const RankGroup& x = c_.groups[size_t(g)];
    return p_ >= x.first_rank && p_ < x.first_rank + x.tp;
  }

  CommandReply execute(const PoolCommand& c) {
    const double t0 = now_seconds();
    CommandReply reply;
    for (const auto& [g, id] : c.drops)
      if (member(g)) kv->release(id);
    const int64_t bytes_per_token = kv_bytes_per_token(c_.model->config.head_dim, DType::F32);
    for (size_t k = 0; k < c.migrations.size(); ++k) {
      const MigrationCmd& m = c.migrations[k];
      std::vector<int> ranks;
      for (const auto* parts : {&m.from, &m.to})
        for (const MigrationPart& part : *parts)
          for (int r : c_.ranks_of(part.group)) ranks.push_back(r);
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      if (!std::binary_search(ranks.begin(), ranks.end(), p_)) continue;
      auto it = by_ranks.find(ranks);
      LOOM_CHECK(it != by_ranks.end(), "pool rank ", p_, ": no group was split for a migration over ", ranks.size(), " ranks");
      auto parts_of = [&](const std::vector<MigrationPart>& parts) {
        std::vector<PlacementPart> out;
        for (const MigrationPart& part : parts) {
          PlacementPart x;
          x.placement = &placements.at(c_.groups[size_t(part.group)].tp);
          for (int r : c_.ranks_of(part.group))
            x.where.push_back(int(std::lower_bound(ranks.begin(), ranks.end(), r) - ranks.begin()));
          x.seqs = part.seqs;
          std::sort(x.seqs.begin(), x.seqs.end());
          out.push_back(std::move(x));
        }
        return combine_placements(out, int(ranks.size()));
      };
      const KvPlacement from = parts_of(m.from), to = parts_of(m.to);
      const KvMigration mig = kv_migration(from, to, m.extents, c_.config.block_size, bytes_per_token);
      KvTransferOptions t = transfer;
      t.all_sequences = m.all_sequences;
      const KvTransferStats st = execute_kv_migration(mig, to, m.extents, *kv, *it->second, t, &scratch_);
      reply.migrations.push_back({uint32_t(k), mig.total_bytes, st.seconds});
    }
    reply.seconds = now_seconds() - t0;
    return reply;
  }

  const PoolOptions& o_;
  Common& c_;
  int p_;
  KvTransferScratch scratch_;
};

// ---------------------------------------------------------------------------------------------
// The control plane.

// A pool instance's executor: its steps run on its ranks through the group's driver thread
// (Control::launch), so execute() is never called; release() collects what the next step's
// descriptor (or a reconfiguration's drops) tells the ranks to free.
class InstanceExecutor final : public StepExecutor {
 public:
  StepResult execute(const StepBatch&) override {
    fail("a pool instance's steps run through EngineLoop::begin_step / end_step (cluster/pool.h)");
  }
  void release(RequestId id) override { released.push_back(id); }
  std::vector<RequestId> released;
};

// An instance of the pool; its loop's plan control names each step after it.
struct Instance final : StepPlanner {
  void choose_plan(StepBatch& b) override { b.plan = name; }
  InstanceSpec spec;
  int group = 0;
  std::string name;
  int index = -1;  // in the GlobalScheduler's instances
  bool stopping = false;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<InstanceExecutor> exec;
  std::unique_ptr<EngineLoop> loop;
  std::optional<EngineLoop::Pending> inflight;
};

struct Job {
  enum Kind { kStep, kCommand, kStop } kind = kStep;
  std::vector<uint8_t> wire;
  Instance* inst = nullptr;
  int64_t command = -1;
};

struct Done {
  Job::Kind kind = Job::kStep;
  Instance* inst = nullptr;
  int64_t command = -1;
  StepResult result;
  CommandReply reply;
  std::string error;
};

struct Channel {
  int group = 0;
  Communicator* cmd = nullptr;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  bool listening = false;
  bool quit = false;
};

struct Track {
  Instance* inst = nullptr;
  QueueKind queue = QueueKind::Feasible;
  int tier = 0;
  int client_priority = 0;
};

struct CommandState {
  bool regroup = false;
  int replies_left = 0;
  double t_start = 0;
  std::vector<int64_t> bytes;     // per migration
  std::vector<double> seconds;    // per migration, the slowest rank
  std::vector<int> dst_group;     // per migration, the first destination group (for plan_stats)
};

SchedulerOptions scheduler_options(const PoolOptions& o, const Common& c) {
  SchedulerOptions s;
  s.window_s = o.window_s;
  s.planner = o.planner;
  s.planner.tp_degrees.clear();
  for (int t : c.degrees)
    if (o.layouts.empty() && o.table.has(t)) s.planner.tp_degrees.push_back(t);
  if (!o.layouts.empty()) {
    // Forced layouts: no profile table, so routing is SLO-agnostic (least-loaded over the
    // prefill-capable instances; decode hand-offs still by tier), batch caps from --max-num-seqs.
    s.slo_aware = false;
    s.dynamic = false;
  }
  return s;
}

ProfileTable table_for(const PoolOptions& o, const Common& c) {
  if (!o.layouts.empty()) return ProfileTable(int(c.tiers.size()), c.degrees);
  return o.table;
}

class Control final : public PoolEngine, public LiveLoop {
 public:
  Control(const PoolOptions& o, Common& c, std::vector<std::unique_ptr<Communicator>> cmd,
          std::vector<int64_t> group_blocks, const std::vector<InstanceSpec>& first, std::vector<std::string> info)
      : o_(o),
        c_(c),
        cmd_(std::move(cmd)),
        blocks_(std::move(group_blocks)),
        gs_(c.tiers, table_for(o, c), c.n, scheduler_options(o, c)),
        info_(std::move(info)) {
    for (const auto& l : o.layouts) layouts_.push_back(placed_layout(l, c.n));
    min_blocks_ = int(*std::min_element(blocks_.begin(), blocks_.end()));
    for (size_t g = 0; g < c.groups.size(); ++g) group_stats_.push_back(PlanStats{c.group_name(int(g))});
    keepalive_wire_ = encode_command(PoolCommand{true, {}, {}, {}});
    ClusterPlan plan;
    plan.instances = first;
    gs_.install(plan);
    build_instances({});
    for (auto& in : instances_) ++group_stats_[size_t(in->group)].switches;
    {
      std::lock_guard<std::mutex> lk(stats_mu_);
      stats_.layout = layout_string(gs_.plan().instances);
    }
    for (size_t g = 0; g < c.groups.size(); ++g) {
      auto ch = std::make_unique<Channel>();
      ch->group = int(g);
      ch->cmd = cmd_[g].get();
      channels_.push_back(std::move(ch));
    }
    for (auto& in : instances_) channels_[size_t(in->group)]->listening = true;
    for (auto& ch : channels_) {
      Channel* p = ch.get();
      p->thread = std::thread([this, p] { drive(*p); });
    }
    last_window_ = clock_.now();
    next_window_ = last_window_ + o_.window_s;
  }

  ~Control() override { shut_down(); }

  // ---- EngineHandle / PoolEngine ----
  const EngineConfig& config() const override { return c_.config; }
  int num_kv_blocks() const override { return min_blocks_; }
  LiveLoop& loop() override { return *this; }
  Clock& clock() override { return clock_; }
  Metrics& metrics() override { return metrics_; }
  std::vector<PlanStats> plan_stats() const override { return group_stats_; }
  std::string fault() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return fault_;
  }
  int num_ranks() const override { return c_.n; }
  const std::vector<std::string>& start_info() const override { return info_; }
  PoolStats pool_stats() const override {
    std::lock_guard<std::mutex> lk(stats_mu_);
    return stats_;
  }

  // ---- LiveLoop ----
  void submit(Request r) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      inbox_.push_back(std::move(r));
    }
    done_cv_.notify_all();
  }
  void cancel(RequestId id) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      cancels_.push_back(id);
    }
    done_cv_.notify_all();
  }
  void set_stop_check(StopCheck check) override {
    stop_check_ = std::move(check);
    for (auto& in : instances_) in->sched->set_stop_check(stop_check_);
  }
  LoopStats stats() const override {
    LoopStats s;
    for (const auto& in : instances_) s += in->loop->stats();
    s.num_preemptions += retired_preemptions_;
    s.num_steps += retired_steps_;
    return s;
  }
  bool idle() const override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!inbox_.empty() || !cancels_.empty() || !done_.empty()) return false;
    }
    if (pending_ || !commands_.empty()) return false;
    for (const auto& in : instances_)
      if (in->inflight || !in->loop->idle() || !in->exec->released.empty()) return false;
    return true;
  }

  bool step() override {
    std::vector<Request> in;
    std::vector<RequestId> cancels;
    {
      std::lock_guard<std::mutex> lk(mu_);
      in.swap(inbox_);
      cancels.swap(cancels_);
    }
    for (Request& r : in) route_new(std::move(r));
    for (RequestId id : cancels) {
      auto it = track_.find(id);
      if (it == track_.end()) continue;
      Instance* inst = it->second.inst;
      inst->loop->cancel(id);
      inst->loop->poll();
    }
    const double now = clock_.now();
    if (o_.window_steps > 0 ? steps_since_window_ >= o_.window_steps : now >= next_window_) window(now);
    if (pending_) try_apply();
    const bool launched = launch();
    const bool collected = collect(!launched);
    return launched || collected;
  }

  void shut_down() {
    if (shut_) return;
    shut_ = true;
    if (fault().empty())
      for (auto& in : instances_)
        if (!in->exec->released.empty()) send_command(PoolCommand{}, {in->group}, false);
    for (auto& ch : channels_) {
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        if (ch->listening) ch->jobs.push_back(Job{Job::kStop, encode_stop(), nullptr, -1});
        ch->quit = true;
      }
      ch->cv.notify_all();
    }
    for (auto& ch : channels_)
      if (ch->thread.joinable()) ch->thread.join();
  }

 private:
  // ---- instances ----

  std::unique_ptr<Instance> make_instance(const InstanceSpec& spec) {
    auto in = std::make_unique<Instance>();
    in->spec = spec;
    in->group = c_.group_of(spec.first_rank, spec.tp);
    in->name = spec.to_string();
    SchedulerConfig sc;
    const InstanceState* st = nullptr;
    for (const InstanceState& s : gs_.instances())
      if (s.spec == spec) st = &s;
    sc.max_num_seqs = std::max(1, std::min(c_.config.max_num_seqs, st ? st->batch_cap : c_.config.max_num_seqs));
    sc.max_tokens_per_step = c_.config.max_tokens_per_step;
    sc.block_size = c_.config.block_size;
    sc.max_model_len = c_.config.max_model_len;
    sc.enable_chunked_prefill = c_.config.enable_chunked_prefill;
    const int blocks = int(blocks_[size_t(in->group)]);
    if (blocks < 1)
      fail("instance ", in->name, ": the KV budget of its ranks holds no block of ", c_.config.block_size,
           " tokens for its KV heads; raise --kv-cache-bytes");
    sc.pool_shapes = {KvPoolShape{1, 1, blocks}};
    sc.num_blocks = blocks;
    in->sched = std::make_unique<Scheduler>(sc);
    if (stop_check_) in->sched->set_stop_check(stop_check_);
    in->exec = std::make_unique<InstanceExecutor>();
    in->loop = std::make_unique<EngineLoop>(*in->sched, *in->exec, clock_, metrics_, in.get());
    in->loop->on_batch = [this](const StepBatch& b) {
      if (on_batch) on_batch(b);
    };
    in->loop->on_token = [this](const TokenEvent& ev) {
      if (on_token) on_token(ev);
    };
    in->loop->on_finish = [this](const Sequence& s) {
      auto it = track_.find(s.id());
      if (it != track_.end()) {
        if (it->second.inst->index >= 0) gs_.complete(it->second.inst->index, it->second.queue);
        track_.erase(it);
      }
      if (on_finish) on_finish(s);
    };
    return in;
  }

  // by_index_ from the installed plan: an instance of `keep` with the same spec is reused, the
  // others are made. Returns the made ones.
  std::vector<Instance*> build_instances(std::vector<std::unique_ptr<Instance>> keep) {
    std::vector<std::unique_ptr<Instance>> next;
    std::vector<Instance*> made;
    by_index_.clear();
    const auto& st = gs_.instances();
    for (size_t i = 0; i < st.size(); ++i) {
      std::unique_ptr<Instance> in;
      for (auto& k : keep)
        if (k && k->spec == st[i].spec) {
          in = std::move(k);
          break;
        }
      if (!in) {
        in = make_instance(st[i].spec);
        made.push_back(in.get());
      }
      in->index = int(i);
      by_index_.push_back(in.get());
      next.push_back(std::move(in));
    }
    for (auto& k : keep) LOOM_CHECK(k == nullptr, "instance ", k->name, " survives in no slot of the new plan");
    instances_ = std::move(next);
    return made;
  }

  int tier_of(const Request& r) const {
    return r.tier >= 0 && size_t(r.tier) < c_.tiers.size() ? r.tier : 0;
  }

  void route_new(Request r) {
    const int tier = tier_of(r);
    gs_.record_arrival(tier);
    const Dispatch d = gs_.route(tier);
    Instance* in = by_index_.at(size_t(d.instance));
    track_[r.id] = Track{in, d.queue, tier, r.priority};
    r.priority = queue_priority(d.queue, r.priority);
    in->loop->submit(std::move(r));
    in->loop->poll();
  }

  // ---- steps ----

  bool launch() {
    bool launched = false;
    const std::string broken = fault();
    for (auto& in : instances_) {
      if (in->inflight || in->stopping) continue;
      std::optional<EngineLoop::Pending> p = in->loop->begin_step();
      if (!p) {
        // Nothing to run: what finished since the last step leaves the ranks' stores now (no
        // later step would carry it).
        if (!in->exec->released.empty() && broken.empty()) send_command(PoolCommand{}, {in->group}, false);
        continue;
      }
      launched = true;
      if (!broken.empty()) {
        in->loop->end_step(*p, nullptr, broken);
        continue;
      }
      Job j;
      j.kind = Job::kStep;
      encode_step(p->batch, in->exec->released, j.wire);
      in->exec->released.clear();
      j.inst = in.get();
      in->inflight = std::move(p);
      enqueue(in->group, std::move(j));
    }
    return launched;
  }

  void enqueue(int group, Job j) {
    Channel& ch = *channels_.at(size_t(group));
    {
      std::lock_guard<std::mutex> lk(ch.mu);
      ch.jobs.push_back(std::move(j));
    }
    ch.cv.notify_all();
  }

  bool anything_in_flight() const {
    if (!commands_.empty()) return true;
    for (const auto& in : instances_)
      if (in->inflight) return true;
    return false;
  }

  bool collect(bool may_wait) {
    std::deque<Done> got;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (done_.empty() && may_wait && anything_in_flight()) {
        const double until_window = std::max(0.0, next_window_ - clock_.now());
        const auto wait = std::chrono::duration<double>(std::min(0.05, until_window + 1e-4));
        done_cv_.wait_for(lk, wait, [&] { return !done_.empty() || !inbox_.empty() || !cancels_.empty(); });
      }
      got.swap(done_);
    }
    bool stepped = false;
    for (Done& d : got) {
      if (d.kind == Job::kStep) {
        stepped = true;
        finish_step(d);
      } else if (d.kind == Job::kCommand) {
        finish_command(d);
      }
    }
    if (pending_) try_apply();
    return stepped;
  }

  void finish_step(Done& d) {
    Instance& in = *d.inst;
    LOOM_CHECK(in.inflight.has_value(), "a step of ", in.name, " came back twice");
    EngineLoop::Pending p = std::move(*in.inflight);
    in.inflight.reset();
    if (!d.error.empty()) {
      in.loop->end_step(p, nullptr, d.error);
      return;
    }
    PlanStats& gs = group_stats_[size_t(in.group)];
    ++gs.steps;
    ++steps_since_window_;
    gs.tokens += p.batch.num_tokens;
    in.loop->end_step(p, &d.result);
    if (in.spec.role == Role::Prefill && !in.stopping && !pending_) handoffs(in, p.batch);
  }

  // ---- P/D hand-off (PAPERS-NOTES 2.4.6) ----

  void handoffs(Instance& P, const StepBatch& batch) {
    PoolCommand cmd;
    std::map<Instance*, MigrationCmd> by_dst;
    for (const ScheduledSeq& e : batch.seqs) {
      const Sequence* s = P.sched->find(e.seq_id);
      if (!s || s->status != SeqStatus::kRunning || !s->is_decode()) continue;
      auto t = track_.find(e.seq_id);
      if (t == track_.end()) continue;
      const int d = gs_.route_decode(t->second.tier, t->second.queue);
      if (d < 0) continue;  // no decode instance: it decodes where it prefilled
      Instance* D = by_index_.at(size_t(d));
      gs_.complete(P.index, t->second.queue);
      std::optional<Sequence> seq = P.sched->extract(e.seq_id);
      LOOM_CHECK(seq.has_value());
      const SeqExtent ext{seq->id(), seq->num_computed};
      if (D->sched->adopt(std::move(*seq))) {
        MigrationCmd& m = by_dst[D];
        m.all_sequences = false;
        if (m.from.empty()) m.from.push_back({P.group, {}}), m.to.push_back({D->group, {}});
        m.from[0].seqs.push_back(ext.id);
        m.to[0].seqs.push_back(ext.id);
        m.extents.push_back(ext);
      } else {
        cmd.drops.push_back({P.group, ext.id});
        std::lock_guard<std::mutex> lk(stats_mu_);
        ++stats_.recomputed;
      }
      t->second.inst = D;
      std::lock_guard<std::mutex> lk(stats_mu_);
      ++stats_.handoffs;
    }
    if (by_dst.empty() && cmd.drops.empty()) return;
    std::set<int> groups{P.group};
    for (auto& [D, m] : by_dst) {
      groups.insert(D->group);
      cmd.migrations.push_back(std::move(m));
    }
    send_command(cmd, groups, false);
  }

  // `t_start`: when the change began (a regrouping: its window boundary); < 0: now. The K/V its
  // groups' instances released since their last step is dropped first: the ranks still hold it,
  // while their schedulers count those blocks free again (a migration into them needs the room).
  void send_command(PoolCommand cmd, const std::set<int>& groups, bool regroup, double t_start = -1) {
    for (auto& in : instances_)
      if (groups.count(in->group)) {
        for (RequestId r : in->exec->released) cmd.drops.push_back({in->group, r});
        in->exec->released.clear();
      }
    const int64_t id = next_command_++;
    CommandState& st = commands_[id];
    st.regroup = regroup;
    st.replies_left = int(groups.size());
    st.t_start = t_start >= 0 ? t_start : clock_.now();
    st.bytes.assign(cmd.migrations.size(), 0);
    st.seconds.assign(cmd.migrations.size(), 0.0);
    for (const MigrationCmd& m : cmd.migrations) st.dst_group.push_back(m.to.empty() ? 0 : m.to[0].group);
    const std::vector<uint8_t> wire = encode_command(cmd);
    for (int g : groups) enqueue(g, Job{Job::kCommand, wire, nullptr, id});
  }

  void finish_command(Done& d) {
    auto it = commands_.find(d.command);
    if (it == commands_.end()) return;
    CommandState& st = it->second;
    for (const MigrationDone& m : d.reply.migrations)
      if (m.index < st.bytes.size()) {
        st.bytes[m.index] = m.bytes;
        st.seconds[m.index] = std::max(st.seconds[m.index], m.seconds);
      }
    if (--st.replies_left > 0) return;
    int64_t bytes = 0;
    double mig_s = 0;
    for (size_t k = 0; k < st.bytes.size(); ++k) {
      bytes += st.bytes[k];
      mig_s += st.seconds[k];
      PlanStats& g = group_stats_[size_t(st.dst_group[k])];
      g.kv_bytes_moved += st.bytes[k];
      g.switch_s += st.seconds[k];
    }
    {
      std::lock_guard<std::mutex> lk(stats_mu_);
      if (st.regroup) {
        const double s = clock_.now() - st.t_start;
        stats_.regroup_bytes += bytes;
        stats_.migrate_s_total += mig_s;
        stats_.switch_s_total += s;
        stats_.switch_s_max = std::max(stats_.switch_s_max, s);
      } else {
        stats_.handoff_bytes += bytes;
        stats_.handoff_s_total += mig_s;
      }
    }
    commands_.erase(it);
  }

  // ---- control windows and reconfiguration ----

  struct PendingChange {
    ClusterPlan plan;
    std::vector<std::pair<int, int>> components;  // changed: [first, end) pool ranks
    double t_start = 0;
  };

  void window(double now) {
    const double elapsed = std::max(1e-6, now - last_window_);
    steps_since_window_ = 0;
    last_window_ = now;
    next_window_ = now + o_.window_s;
    {
      std::lock_guard<std::mutex> lk(stats_mu_);
      ++stats_.windows;
    }
    if (pending_) return;  // the last change is still stopping its instances
    std::optional<ClusterPlan> next;
    if (!layouts_.empty()) {
      if (layouts_.size() > 1) {
        cursor_ = (cursor_ + 1) % layouts_.size();
        ClusterPlan p;
        p.instances = layouts_[cursor_];
        next = p;
      }
    } else {
      next = gs_.next_window(elapsed);
      if (next) fill_spares(&next->instances, c_.n, c_.degrees.front(), c_.tiers.background());
    }
    if (!next) return;
    // Components: maximal rank ranges covered by overlapping old and new instances. Aligned
    // groups nest, so a component is the range of its largest group.
    std::vector<InstanceSpec> old;
    for (const auto& in : instances_) old.push_back(in->spec);
    std::vector<InstanceSpec> all = old;
    all.insert(all.end(), next->instances.begin(), next->instances.end());
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.tp > b.tp; });
    std::vector<char> done(size_t(c_.n), 0);
    std::vector<std::pair<int, int>> ranges;
    for (const InstanceSpec& x : all) {
      if (done[size_t(x.first_rank)]) continue;
      for (int r = x.first_rank; r < x.first_rank + x.tp; ++r) done[size_t(r)] = 1;
      ranges.push_back({x.first_rank, x.first_rank + x.tp});
    }
    PendingChange change;
    change.plan = *next;
    change.t_start = now;
    for (const auto& range : ranges) {
      const int a = range.first, b = range.second;  // not a structured binding: clang 14 cannot capture those
      auto inside = [&](const std::vector<InstanceSpec>& v) {
        std::vector<std::string> s;
        for (const InstanceSpec& x : v)
          if (x.first_rank >= a && x.first_rank < b) s.push_back(x.to_string());
        std::sort(s.begin(), s.end());
        return s;
      };
      if (inside(old) != inside(next->instances)) change.components.push_back({a, b});
    }
    if (change.components.empty()) return;
    for (auto& in : instances_)
      for (const auto& [a, b] : change.components)
        if (in->spec.first_rank >= a && in->spec.first_rank < b) in->stopping = true;
    pending_ = std::move(change);
    try_apply();
  }

  void try_apply() {
    for (const auto& in : instances_)
      if (in->stopping && in->inflight) return;
    PendingChange change = std::move(*pending_);
    pending_.reset();
    apply(change);
  }

  // A new instance of component [a, b) for a request with K/V: the same group as `from` when its
  // role fits, else by role (decode-ready: Decode, Both, Prefill; prefilling: Prefill, Both,
  // Decode), then the fewest requests.
  Instance* local_home(const Instance& from, const Sequence& s, int a, int b) {
    const bool decode = s.is_decode();
    auto rank = [&](Role r) {
      if (decode) return r == Role::Decode ? 0 : r == Role::Both ? 1 : 2;
      return r == Role::Prefill ? 0 : r == Role::Both ? 1 : 2;
    };
    Instance* best = nullptr;
    auto key = [&](Instance* x) {
      const LoopStats st = x->loop->stats();
      const bool same = x->group == from.group;
      return std::make_tuple(same && rank(x->spec.role) < 2 ? 0 : 1, rank(x->spec.role), st.num_running + st.num_waiting);
    };
    for (Instance* x : by_index_) {
      if (x->spec.first_rank < a || x->spec.first_rank >= b) continue;
      if (!best || key(x) < key(best)) best = x;
    }
    LOOM_CHECK(best != nullptr, "no new instance in pool ranks [", a, ",", b, ")");
    return best;
  }

  void apply(const PendingChange& change) {
    // 1. The stopping instances' queued cancellations and finished requests, then their requests'
    // counts leave the old plan.
    std::vector<std::unique_ptr<Instance>> old, keep;
    for (auto& in : instances_) {
      if (in->stopping) in->loop->poll();
    }
    for (auto& [id, t] : track_)
      if (t.inst->stopping) gs_.complete(t.inst->index, t.queue);
    for (auto& in : instances_) (in->stopping ? old : keep).push_back(std::move(in));
    // 2. The new plan; surviving instances keep their slot, the changed components get new ones.
    gs_.install(change.plan);
    const std::vector<Instance*> made = build_instances(std::move(keep));
    for (Instance* in : made) ++group_stats_[size_t(in->group)].switches;
    // 3. Re-home every request of the stopped instances.
    PoolCommand cmd;
    cmd.assignment.assign(size_t(c_.n), -1);
    for (Instance* in : by_index_)
      for (int r = in->spec.first_rank; r < in->spec.first_rank + in->spec.tp; ++r) cmd.assignment[size_t(r)] = in->group;
    std::map<std::pair<int, int>, MigrationCmd> by_comp;
    int64_t moved = 0, recomputed = 0;
    for (auto& R : old) {
      for (RequestId id : R->exec->released) cmd.drops.push_back({R->group, id});
      R->exec->released.clear();
      std::vector<RequestId> ids;
      for (const auto& [id, t] : track_)
        if (t.inst == R.get()) ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      std::pair<int, int> comp{0, 0};
      for (const auto& c : change.components)
        if (R->spec.first_rank >= c.first && R->spec.first_rank < c.second) comp = c;
      for (RequestId id : ids) {
        std::optional<Sequence> s = R->sched->extract(id);
        LOOM_CHECK(s.has_value(), "request ", id, " is tracked on ", R->name, " but not live there");
        Track& t = track_.at(id);
        ++moved;
        if (s->num_computed == 0) {
          // Metadata and prompt only (N5): routed afresh.
          const Dispatch d = gs_.route(t.tier);
          t.queue = d.queue;
          t.inst = by_index_.at(size_t(d.instance));
          s->request.priority = queue_priority(d.queue, t.client_priority);
          t.inst->sched->adopt(std::move(*s));
          continue;
        }
        Instance* D = local_home(*R, *s, comp.first, comp.second);
        gs_.assign(D->index, t.queue);
        t.inst = D;
        const SeqExtent ext{id, s->num_computed};
        if (D->sched->adopt(std::move(*s))) {
          MigrationCmd& m = by_comp[comp];
          auto part = [](std::vector<MigrationPart>& v, int g) -> MigrationPart& {
            for (MigrationPart& p : v)
              if (p.group == g) return p;
            v.push_back({g, {}});
            return v.back();
          };
          part(m.from, R->group).seqs.push_back(id);
          part(m.to, D->group).seqs.push_back(id);
          m.extents.push_back(ext);
        } else {
          cmd.drops.push_back({R->group, id});
          ++recomputed;
        }
      }
      retired_preemptions_ += R->sched->num_preemptions();
      retired_steps_ += R->sched->num_steps();
    }
    for (auto& [comp, m] : by_comp) cmd.migrations.push_back(std::move(m));
    // 4. Every rank of a stopped instance gets the command on the channel it listens on; the
    // new groups' channels take over.
    std::set<int> groups;
    for (auto& R : old) groups.insert(R->group);
    send_command(cmd, groups, true, change.t_start);
    for (int g : groups) {
      Channel& ch = *channels_[size_t(g)];
      std::lock_guard<std::mutex> lk(ch.mu);
      ch.listening = false;
    }
    for (Instance* in : by_index_) {
      Channel& ch = *channels_[size_t(in->group)];
      std::lock_guard<std::mutex> lk(ch.mu);
      ch.listening = true;
    }
    std::lock_guard<std::mutex> lk(stats_mu_);
    ++stats_.reconfigurations;
    stats_.moved += moved;
    stats_.recomputed += recomputed;
    stats_.layout = layout_string(gs_.plan().instances);
  }

  // ---- the driver thread of one group ----

  void post(Done d) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!d.error.empty() && fault_.empty()) fault_ = d.error;
      done_.push_back(std::move(d));
    }
    done_cv_.notify_all();
  }

  void drive(Channel& ch) {
    std::vector<uint8_t> inl;
    const auto period = std::chrono::duration<double>(std::clamp(o_.window_s, 0.05, 5.0));
    for (;;) {
      Job job;
      bool keepalive = false;
      {
        std::unique_lock<std::mutex> lk(ch.mu);
        ch.cv.wait_for(lk, period, [&] { return !ch.jobs.empty() || ch.quit; });
        if (ch.jobs.empty()) {
          if (ch.quit) return;
          if (!ch.listening || !fault().empty()) continue;
          keepalive = true;
          job.kind = Job::kCommand;
          job.wire = keepalive_wire_;
        } else {
          job = std::move(ch.jobs.front());
          ch.jobs.pop_front();
        }
      }
      Done d;
      d.kind = job.kind;
      d.inst = job.inst;
      d.command = job.command;
      try {
        if (!fault().empty() && job.kind != Job::kStop) fail(fault());
        broadcast_descriptor(*ch.cmd, job.wire, inl);
        if (job.kind == Job::kStep) d.result = decode_tokens(recv_message(*ch.cmd, 1, kTagTokens, "pool tokens"));
        if (job.kind == Job::kCommand && !keepalive) d.reply = decode_reply(recv_message(*ch.cmd, 1, kTagReply, "pool reply"));
      } catch (const std::exception& e) {
        d.error = cat("pool group ", c_.group_name(ch.group), ": ", e.what());
      }
      if (job.kind == Job::kStop) return;
      if (keepalive && d.error.empty()) continue;
      if (keepalive) d.kind = Job::kStop;  // only its error matters
      post(std::move(d));
    }
  }

  const PoolOptions& o_;
  Common& c_;
  std::vector<std::unique_ptr<Communicator>> cmd_;
  std::vector<int64_t> blocks_;  // per candidate group
  int min_blocks_ = 0;
  GlobalScheduler gs_;
  std::vector<std::string> info_;
  std::vector<std::vector<InstanceSpec>> layouts_;
  size_t cursor_ = 0;
  WallClock clock_;
  Metrics metrics_;
  StopCheck stop_check_;
  std::vector<std::unique_ptr<Instance>> instances_;
  std::vector<Instance*> by_index_;
  std::unordered_map<RequestId, Track> track_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<uint8_t> keepalive_wire_;
  std::vector<PlanStats> group_stats_;
  std::map<int64_t, CommandState> commands_;
  int64_t next_command_ = 0;
  std::optional<PendingChange> pending_;
  double last_window_ = 0, next_window_ = 0;
  int64_t steps_since_window_ = 0;  // PoolOptions::window_steps
  int64_t retired_preemptions_ = 0, retired_steps_ = 0;
  bool shut_ = false;

  mutable std::mutex mu_;  // inbox, cancels, done, fault
  std::condition_variable done_cv_;
  std::vector<Request> inbox_;
  std::vector<RequestId> cancels_;
  std::deque<Done> done_;
  std::string fault_;

  mutable std::mutex stats_mu_;
  PoolStats stats_;
};

// ---------------------------------------------------------------------------------------------
// Set-up, on every world rank (collectives in the same order everywhere).

int resolve_threads(const PoolOptions& o) {
  if (o.engine.threads > 0) return o.engine.threads;
  if (o.comm == "mpi") {
    int local = 1;
    if (const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(s));
    return std::max(1, default_thread_count() / local);
  }
  return 1;
}

void run_rank(const PoolOptions& o, Communicator& world, const std::function<void(PoolEngine&)>& driver) {
  check_pool_options(o);
  const int n = o.ranks;
  if (world.size() != n + 1)
    fail("a pool of ", n, " ranks runs on ", n + 1, " world ranks (the control plane and ", n, " workers); the ",
         world.backend(), " world has ", world.size(), world.backend() == "mpi" ? cat(": start it with mpirun -np ", n + 1) : "");
  const std::string options_text = describe_options(o);
  world.check_agreement("the pool options", hash_bytes(options_text.data(), options_text.size()));
  const int me = world.rank() - 1;  // pool rank; -1 on the control plane

  Common c;
  c.n = n;
  c.tiers = o.tiers.size() ? o.tiers : SloTiers({SloTier{"default", 1e9, 1e9, false}});
  c.model = o.load_model ? o.load_model(world.rank()) : std::shared_ptr<const Model>(load_model(o.model_path));
  LOOM_CHECK(c.model != nullptr, "load_model returned no model");
  const ModelConfig& mc = c.model->config;
  c.config = o.engine;
  c.config.validate(mc);
  if (c.config.max_model_len == 0) c.config.max_model_len = mc.max_seq_len;
  c.shape = ModelShape::from(mc, weight_block_elems(*c.model));
  const std::vector<int> cand = candidate_tp_degrees(n, o.min_tp, max_degree(o));
  for (int t : cand) {
    try {
      validate(group_plan(t), c.shape);
      c.degrees.push_back(t);
    } catch (const Error& e) {
      if (t == cand.front()) fail("the pool's smallest TP degree ", t, " cannot run the model: ", e.what());
      break;
    }
  }
  for (const auto& layout : o.layouts)
    for (const InstanceSpec& x : layout)
      if (std::find(c.degrees.begin(), c.degrees.end(), x.tp) == c.degrees.end())
        fail("pool layout ", layout_string(layout), ": tp", x.tp, " cannot run this model (its degrees: tp",
             c.degrees.front(), "..tp", c.degrees.back(), ")");
  c.groups = all_candidate_groups(n, c.degrees);
  const std::string model_text = cat(mc.summary(), " block=", c.config.block_size, " max_len=", c.config.max_model_len,
                                    " numerics=", kernels::numerics_name(c.config.resolved_numerics()));
  world.check_agreement("the model and engine config", hash_bytes(model_text.data(), model_text.size()));

  // The first layout, decided by the control plane.
  std::vector<InstanceSpec> first;
  std::vector<int32_t> assignment(size_t(n), -1);
  if (me < 0) {
    if (!o.layouts.empty()) {
      first = placed_layout(o.layouts.front(), n);
    } else {
      std::vector<double> demand(c.tiers.size(), 0.0);
      for (size_t i = 0; i < c.tiers.size(); ++i) demand[i] = c.tiers[i].background ? 0.0 : 1.0;
      PlannerOptions po = o.planner;
      for (int t : c.degrees)
        if (o.table.has(t)) po.tp_degrees.push_back(t);
      if (po.tp_degrees.empty()) fail("the profile table has none of the pool's TP degrees");
      first = plan_cluster(o.table, c.tiers, demand, n, po).instances;
      fill_spares(&first, n, c.degrees.front(), c.tiers.background());
    }
    for (const InstanceSpec& x : first)
      for (int r = x.first_rank; r < x.first_rank + x.tp; ++r) assignment[size_t(r)] = c.group_of(x.first_rank, x.tp);
  }
  world.broadcast(assignment.data(), assignment.size() * sizeof(int32_t), 0);

  // The groups, split once.
  auto member = [&](size_t g) {
    return me >= c.groups[g].first_rank && me < c.groups[g].first_rank + c.groups[g].tp;
  };
  Worker w(o, c, me);
  std::vector<std::unique_ptr<Communicator>> cmd(c.groups.size());
  for (size_t g = 0; g < c.groups.size(); ++g) {
    std::unique_ptr<Communicator> tp = world.split(member(g) ? 0 : -1, world.rank());
    std::unique_ptr<Communicator> ch = world.split(member(g) || me < 0 ? 0 : -1, world.rank());
    if (member(g)) {
      w.by_ranks[c.ranks_of(int(g))] = tp.get();
      w.tp[int(g)] = std::move(tp);
      w.cmd[int(g)] = std::move(ch);
    } else if (me < 0) {
      cmd[g] = std::move(ch);
    }
  }
  std::set<std::vector<int>> group_ranks;
  for (size_t g = 0; g < c.groups.size(); ++g) group_ranks.insert(c.ranks_of(int(g)));
  for (size_t a = 0; a < c.groups.size(); ++a)
    for (size_t b = a + 1; b < c.groups.size(); ++b) {
      const RankGroup &x = c.groups[a], &y = c.groups[b];
      if (x.first_rank < y.first_rank + y.tp && y.first_rank < x.first_rank + x.tp) continue;  // nested
      std::vector<int> ranks = c.ranks_of(int(a));
      for (int r : c.ranks_of(int(b))) ranks.push_back(r);
      std::sort(ranks.begin(), ranks.end());
      if (group_ranks.count(ranks)) continue;  // the union is a candidate group: its own comm serves
      group_ranks.insert(ranks);
      std::unique_ptr<Communicator> pc = world.split(member(a) || member(b) ? 0 : -1, world.rank());
      if (pc) {
        w.by_ranks[ranks] = pc.get();
        w.pair_comms.push_back(std::move(pc));
      }
    }

  // KV pages per pool rank: the engine's one budget formula (kv_budget_bytes), each rank holding
  // the whole model as views (dp=N,weights=full: nothing copied), capped like a TP(1) instance's.
  const int64_t page_bytes = 2 * int64_t(c.config.block_size) * mc.head_dim * int64_t(sizeof(float));
  int64_t mine = 0;
  if (me >= 0) {
    const PlanSet replicas = PlanSet::make({Plan::parse(cat("dp=", n, ",weights=full"))}, c.shape);
    const bool local = o.comm != "mpi";
    const int64_t budget = kv_budget_bytes(c.config, *c.model, replicas, me, local ? 0 : me, local ? n : 1);
    mine = kv_pages_for(c.config, PlanSet::make({group_plan(1)}, c.shape), 0, mc.head_dim, budget);
  }
  std::vector<int64_t> pages(size_t(n) + 1);
  world.all_gather_bytes(&mine, pages.data(), sizeof mine);
  c.pages.assign(pages.begin() + 1, pages.end());

  // Every candidate group's engine on its ranks (collective over the group, in group order).
  std::vector<int64_t> blocks_mine(c.groups.size(), 0);
  if (me >= 0) {
    w.pool = std::make_unique<ThreadPool>(resolve_threads(o));
    w.dev = gpu::make_device(o.device, 0, w.pool.get());
    w.kv = std::make_shared<KvStore>(mc.n_layers, mc.n_kv_heads, mc.head_dim, c.config.block_size, mine, w.dev.get());
    if (o.migration_buffer_bytes > 0) w.transfer.buffer_bytes = o.migration_buffer_bytes;
    for (int t : c.degrees) w.placements.emplace(t, kv_placement(group_plan(t), c.shape));
    for (size_t g = 0; g < c.groups.size(); ++g) {
      if (!member(g)) continue;
      RankEngineOptions ro;
      ro.block_size = c.config.block_size;
      ro.numerics = c.config.resolved_numerics();
      ro.kv_pages = mine;
      ro.kv = w.kv;
      ro.device = w.dev.get();
      ro.transfer = w.transfer;
      const PlanSet set = PlanSet::make({group_plan(c.groups[g].tp)}, c.shape);
      w.engines[int(g)] = std::make_unique<RankEngine>(c.model, set, *w.tp.at(int(g)), w.pool.get(), ro);
      blocks_mine[g] = w.engines[int(g)]->pools(0).blocks_per_pool;
    }
    w.listening = assignment.at(size_t(me));
  }
  std::vector<int64_t> blocks_all(c.groups.size() * (size_t(n) + 1));
  world.all_gather_bytes(blocks_mine.data(), blocks_all.data(), blocks_mine.size() * sizeof(int64_t));
  if (me >= 0) {
    w.run();
    return;
  }

  std::vector<int64_t> blocks(c.groups.size(), 0);
  for (size_t g = 0; g < c.groups.size(); ++g)
    blocks[g] = blocks_all[(size_t(c.groups[g].first_rank) + 1) * c.groups.size() + g];
  std::vector<std::string> info;
  std::string groups_line;
  for (size_t g = 0; g < c.groups.size(); ++g)
    groups_line += cat(g ? " " : "", c.group_name(int(g)), " (", blocks[g], " blocks)");
  std::string deg;
  for (int t : c.degrees) deg += cat(deg.empty() ? "" : ",", t);
  info.push_back(cat("nitsum pool: ", n, " ranks + the control plane (", o.comm, "), TP degrees ", deg,
                     ", control window ", o.window_s, " s; ",
                     o.layouts.empty() ? std::string("the planner over the profile table")
                                       : cat(o.layouts.size(), " forced layout(s), the next every window")));
  info.push_back(cat("candidate groups, each built warm as tp=T,weights=full (views of the mapped file, nothing copied): ",
                     groups_line));
  std::string kv_line = cat("KV store per pool rank (pages of ", c.config.block_size, " tokens x one KV head, ", page_bytes,
                            " bytes):");
  for (int r = 0; r < n; ++r) kv_line += cat(" ", c.pages[size_t(r)]);
  info.push_back(kv_line);
  info.push_back(cat("first layout: ", layout_string(first)));
  Control control(o, c, std::move(cmd), blocks, first, std::move(info));
  try {
    driver(control);
  } catch (...) {
    control.shut_down();
    throw;
  }
  control.shut_down();
}

}  // namespace

std::vector<InstanceSpec> parse_pool_layout(const std::string& text, const SloTiers& tiers) {
  std::vector<InstanceSpec> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    std::vector<std::string> f;
    size_t p = 0;
    while (p <= item.size()) {
      size_t q = item.find(':', p);
      if (q == std::string::npos) q = item.size();
      f.push_back(item.substr(p, q - p));
      p = q + 1;
    }
    auto bad = [&](const std::string& why) {
      fail("pool layout '", text, "': instance '", item, "' ", why, " (ROLE:tpT[:TIER], ROLE prefill|decode|both)");
    };
    if (f.size() < 2 || f.size() > 3) bad("is not ROLE:tpT or ROLE:tpT:TIER");
    InstanceSpec x;
    if (f[0] == "prefill") {
      x.role = Role::Prefill;
    } else if (f[0] == "decode") {
      x.role = Role::Decode;
    } else if (f[0] == "both") {
      x.role = Role::Both;
    } else {
      bad(cat("has role '", f[0], "'"));
    }
    if (f[1].size() < 3 || f[1].compare(0, 2, "tp") != 0 || f[1].find_first_not_of("0123456789", 2) != std::string::npos ||
        f[1].size() > 6)
      bad(cat("has '", f[1], "' where tpT belongs"));
    x.tp = int(parse_int(f[1].substr(2), "--pool-layout TP degree", 0, 9999));
    if (x.tp < 1 || (x.tp & (x.tp - 1))) bad(cat("has TP degree ", x.tp, ", not a power of two"));
    x.tier = 0;
    if (f.size() == 3) {
      if (tiers.size() == 0) bad(cat("names tier '", f[2], "' but the server has no --tiers"));
      x.tier = tiers.find(f[2]);
    }
    out.push_back(x);
  }
  return out;
}

void check_pool_options(const PoolOptions& o) {
  if (o.ranks < 1) fail("--policy nitsum: --ranks (the pool) must be >= 1, got ", o.ranks);
  if (!(o.window_s > 0) || o.window_s > 3600) fail("--window must be in (0, 3600] seconds, got ", o.window_s);
  const std::vector<int> degrees = candidate_tp_degrees(o.ranks, o.min_tp, max_degree(o));
  for (const auto& layout : o.layouts) {
    int covered = 0;
    for (const InstanceSpec& x : layout) {
      if (std::find(degrees.begin(), degrees.end(), x.tp) == degrees.end())
        fail("pool layout ", layout_string(layout), ": tp", x.tp, " is not a TP degree of this pool (", degrees.front(),
             "..", degrees.back(), " over ", o.ranks, " ranks)");
      if (o.tiers.size() && (x.tier < 0 || size_t(x.tier) >= o.tiers.size())) fail("pool layout: tier ", x.tier, " unknown");
      covered += x.tp;
    }
    if (covered != o.ranks)
      fail("pool layout ", layout_string(layout), " covers ", covered, " of the pool's ", o.ranks,
           " ranks (every rank serves one instance)");
    if (std::none_of(layout.begin(), layout.end(), [](const InstanceSpec& x) { return x.role != Role::Decode; }))
      fail("pool layout ", layout_string(layout), " has no prefill or both instance: no request could start");
    placed_layout(layout, o.ranks);
  }
  if (o.layouts.empty()) {
    if (o.table.num_tiers() == 0)
      fail("--policy nitsum needs a profile table for its planner (--profile DIR: `loom profile -o DIR` of this "
           "machine) or forced layouts (--pool-layout)");
    const size_t tiers = o.tiers.size() ? o.tiers.size() : 1;
    if (size_t(o.table.num_tiers()) != tiers)
      fail("the profile table has ", o.table.num_tiers(), " tiers, the pool ", tiers);
  }
}

void run_pool(const PoolOptions& o, const std::function<void(PoolEngine&)>& driver) {
  check_pool_options(o);
  if (o.device == DeviceKind::Cuda && o.comm == "mpi")
    fail("--policy nitsum --device cuda: the pool runs its GPU ranks as threads sharing one GPU (--comm local); "
         "MPI pools are CPU only so far");
  std::unique_ptr<World> world =
      make_world(o.comm, o.comm == "mpi" ? 0 : o.ranks + 1, o.comm_options, gpu::rank_memory(o.device));
  world->run([&](Communicator& comm) { run_rank(o, comm, driver); });
}

}  // namespace loom::cluster
