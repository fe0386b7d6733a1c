// The scheduler as a table (STYLE.md): per step, the events fed in (requests added, cancels,
// tokens the executor samples) and the expected batch, written by hand from the policy in
// engine/scheduler.h.
//
// Batch notation, entries in batch order, space-separated:
//   P<id>:<start>+<n>   prefill chunk computing positions [start, start+n)
//   D<id>:<pos>         decode of position pos
//   a trailing '*'      the entry samples a token
//   !<id>               sequence preempted while building the batch
// Finished notation (drained after the step, in finishing order): "<id>:<reason>".
//
// A checking executor (TableExecutor) stands in for the forward pass: it keeps a fake KV arena
// of (seq, position) tags, writes the computed positions into the slots the batch names, and
// verifies that every earlier position of each sequence is still intact in its blocks and that
// the token ids passed for each position are the prompt / previously sampled ones. Sampled token
// for position p is 100 + p unless the table overrides it.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "engine/engine_loop.h"
#include "engine/scheduler.h"

namespace loom {
namespace {

TokenId prompt_token(RequestId id, int pos) { return TokenId(id * 1000 + pos); }

struct Add {
  RequestId id;
  int prompt;
  int max_tokens;
  int priority = 0;
  std::vector<TokenId> eos = {};
  std::vector<std::vector<TokenId>> stop_seqs = {};
};

struct Row {
  std::vector<Add> adds;
  std::vector<RequestId> cancels;
  std::map<RequestId, TokenId> tokens;  // sampled token overrides
  std::string expect;                   // batch
  std::string finished;                 // after the step
  int free_blocks = -1;                 // after the step; -1 = unchecked
};

struct Case {
  std::string name;
  SchedulerConfig config;
  std::vector<Row> rows;
};

SchedulerConfig cfg(int block_size, int num_blocks, int budget, int max_seqs, int max_len = 256,
                    bool chunked = true, double watermark = 0) {
  SchedulerConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_tokens_per_step = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_len;
  c.enable_chunked_prefill = chunked;
  c.watermark = watermark;
  c.record_block_ids = true;  // TableExecutor writes K/V through the block tables
  return c;
}

std::string format_batch(const StepBatch& b) {
  std::ostringstream os;
  for (const ScheduledSeq& e : b.seqs) {
    if (os.tellp() > 0) os << ' ';
    if (e.is_prefill) {
      os << 'P' << e.seq_id << ':' << e.start << '+' << e.num_tokens;
    } else {
      os << 'D' << e.seq_id << ':' << e.start;
    }
    if (e.sample) os << '*';
  }
  for (RequestId id : b.preempted) {
    if (os.tellp() > 0) os << ' ';
    os << '!' << id;
  }
  return os.str();
}

// Fake forward pass with KV-consistency checks (see the file comment).
class TableExecutor : public StepExecutor {
 public:
  TableExecutor(const SchedulerConfig& c)
      : block_size_(c.block_size), kv_(size_t(c.num_blocks) * size_t(c.block_size), {-1, -1}) {}

  std::map<RequestId, TokenId> overrides;
  ManualClock* clock = nullptr;  // advanced by 1 s per step when set

  StepResult execute(const StepBatch& batch) override {
    StepResult r;
    std::set<BlockId> blocks_in_batch;
    int total = 0;
    for (const ScheduledSeq& e : batch.seqs) {
      EXPECT_GE(e.num_tokens, 1);
      EXPECT_EQ(int(e.token_ids.size()), e.num_tokens);
      EXPECT_GE(int(e.block_ids.size()) * block_size_, e.context_len()) << "seq " << e.seq_id;
      total += e.num_tokens;
      for (BlockId b : e.block_ids) {
        EXPECT_TRUE(blocks_in_batch.insert(b).second) << "block " << b << " in two sequences";
        EXPECT_GE(b, 0);
        EXPECT_LT(size_t(b) * block_size_, kv_.size());
      }
      auto& hist = sampled_[e.seq_id];
      for (int p = 0; p < e.start; ++p) {  // earlier positions must still be in the cache
        const auto tag = kv_[slot(e, p)];
        EXPECT_EQ(tag.first, e.seq_id) << "position " << p << " of seq " << e.seq_id << " clobbered";
        EXPECT_EQ(tag.second, p);
      }
      for (int i = 0; i < e.num_tokens; ++i) {
        const int p = e.start + i;
        auto h = hist.find(p);
        const TokenId want = h != hist.end() ? h->second : prompt_token(e.seq_id, p);
        EXPECT_EQ(e.token_ids[size_t(i)], want) << "seq " << e.seq_id << " position " << p;
        kv_[slot(e, p)] = {e.seq_id, p};
      }
      if (e.sample) {
        const int pos = e.context_len();
        auto o = overrides.find(e.seq_id);
        const TokenId tok = o != overrides.end() ? o->second : TokenId(100 + pos);
        hist[pos] = tok;
        r.sampled.push_back({e.seq_id, tok});
      }
    }
    EXPECT_EQ(total, batch.num_tokens);
    EXPECT_EQ(batch.num_prefill_tokens + batch.num_decode_tokens, batch.num_tokens);
    if (clock) clock->advance(1.0);
    return r;
  }

 private:
  size_t slot(const ScheduledSeq& e, int p) const {
    return size_t(e.block_ids[size_t(p / block_size_)]) * size_t(block_size_) + size_t(p % block_size_);
  }
  int block_size_;
  std::vector<std::pair<RequestId, int>> kv_;
  std::map<RequestId, std::map<int, TokenId>> sampled_;  // positions >= prompt
};

Request make_request(const Add& a, double arrival) {
  Request r;
  r.id = a.id;
  for (int i = 0; i < a.prompt; ++i) r.prompt.push_back(prompt_token(a.id, i));
  r.max_tokens = a.max_tokens;
  r.priority = a.priority;
  r.stop.eos_ids = a.eos;
  r.stop.stop_token_seqs = a.stop_seqs;
  r.arrival_s = arrival;
  return r;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  Scheduler s(c.config);
  TableExecutor exec(c.config);
  for (size_t k = 0; k < c.rows.size(); ++k) {
    const Row& row = c.rows[k];
    SCOPED_TRACE(cat("step ", k));
    for (const Add& a : row.adds) s.add_request(make_request(a, double(k)));
    for (RequestId id : row.cancels) EXPECT_TRUE(s.cancel(id));
    StepBatch b = s.schedule();
    EXPECT_EQ(format_batch(b), row.expect);
    EXPECT_LE(b.num_tokens, c.config.max_tokens_per_step);
    EXPECT_LE(int(b.seqs.size()), c.config.max_num_seqs);
    exec.overrides = row.tokens;
    if (!b.empty()) s.on_step_done(b, exec.execute(b));
    std::ostringstream fin;
    for (const Sequence& q : s.drain_finished()) {
      if (fin.tellp() > 0) fin << ' ';
      fin << q.id() << ':' << finish_reason_name(q.finish_reason);
    }
    EXPECT_EQ(fin.str(), row.finished);
    if (row.free_blocks >= 0) {
      EXPECT_EQ(s.num_free_blocks(), row.free_blocks);
    }
  }
  EXPECT_FALSE(s.has_unfinished()) << c.name << " leaves unfinished sequences";
  EXPECT_EQ(s.num_free_blocks(), c.config.num_blocks) << "blocks leaked";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Sarathi chunked prefill: a 13-token prompt under an 8-token budget; a second request fills
  // the budget left by the last chunk.
  v.push_back({"chunked_prefill_budget", cfg(4, 64, 8, 4),
               {
                   {{{1, 13, 2}}, {}, {}, "P1:0+8", "", 60},
                   {{{2, 5, 1}}, {}, {}, "P1:8+5* P2:0+3", "", 58},
                   {{}, {}, {}, "D1:13* P2:3+2*", "1:length 2:length", 64},
               }});
  // Decodes come first in the batch even when a prefill is more urgent; the prefill takes the
  // budget that is left.
  v.push_back({"decode_first", cfg(4, 64, 4, 4),
               {
                   {{{1, 2, 4}}, {}, {}, "P1:0+2*", ""},
                   {{{2, 9, 1, -1}}, {}, {}, "D1:2* P2:0+3", ""},
                   {{}, {}, {}, "D1:3* P2:3+3", ""},
                   {{}, {}, {}, "D1:4* P2:6+3*", "1:length 2:length"},
               }});
  // max_num_seqs = 2 bounds running sequences: the third waits until a slot frees.
  v.push_back({"max_num_seqs", cfg(4, 64, 64, 2),
               {
                   {{{1, 3, 3}, {2, 3, 3}, {3, 2, 1}}, {}, {}, "P1:0+3* P2:0+3*", ""},
                   {{}, {}, {}, "D1:3* D2:3*", ""},
                   {{}, {}, {}, "D1:4* D2:4*", "1:length 2:length"},
                   {{}, {}, {}, "P3:0+2*", "3:length"},
               }});
  // Admission bounded by free blocks: 6 blocks of 4; two 9-token prompts take 3 blocks each,
  // the third request waits for them to finish.
  v.push_back({"admission_by_free_blocks", cfg(4, 6, 64, 8),
               {
                   {{{1, 9, 3}, {2, 9, 3}, {3, 5, 2}}, {}, {}, "P1:0+9* P2:0+9*", "", 0},
                   {{}, {}, {}, "D1:9* D2:9*", "", 0},
                   {{}, {}, {}, "D1:10* D2:10*", "1:length 2:length", 6},
                   {{}, {}, {}, "P3:0+5*", "", 4},
                   {{}, {}, {}, "D3:5*", "3:length", 6},
               }});
  // Watermark 0.2 of 10 blocks = 2 blocks kept free once something runs (waived for the first).
  v.push_back({"watermark", cfg(4, 10, 64, 8, 256, true, 0.2),
               {
                   {{{1, 16, 1}, {2, 17, 1}}, {}, {}, "P1:0+16*", "1:length", 10},
                   {{}, {}, {}, "P2:0+17*", "2:length", 10},
               }});
  // Preemption by recomputation (vLLM 4.5): 4 blocks of 4 tokens, two growing decodes. At step 5
  // seq 1 needs a third block; seq 2 (same priority, larger id) is the victim and loses its KV.
  // Seq 3 arrives later with the same priority and does not overtake the preempted seq 2; seq 2
  // is recomputed as a 9-token prefill (prompt + 5 outputs) once seq 1 finishes.
  v.push_back({"preempt_and_recompute", cfg(4, 4, 64, 4),
               {
                   {{{1, 4, 8}, {2, 4, 8}}, {}, {}, "P1:0+4* P2:0+4*", "", 2},
                   {{}, {}, {}, "D1:4* D2:4*", "", 0},
                   {{}, {}, {}, "D1:5* D2:5*", "", 0},
                   {{}, {}, {}, "D1:6* D2:6*", "", 0},
                   {{}, {}, {}, "D1:7* D2:7*", "", 0},
                   {{{3, 4, 1}}, {}, {}, "D1:8* !2", "", 1},
                   {{}, {}, {}, "D1:9*", "", 1},
                   {{}, {}, {}, "D1:10*", "1:length", 4},
                   {{}, {}, {}, "P2:0+9* P3:0+4*", "3:length", 1},
                   {{}, {}, {}, "D2:9*", "", 1},
                   {{}, {}, {}, "D2:10*", "2:length", 4},
               }});
  // The least urgent decode preempts itself when every other sequence is more urgent and
  // already scheduled.
  v.push_back({"self_preemption_by_priority", cfg(4, 3, 64, 4),
               {
                   {{{2, 4, 4, 1}, {1, 4, 4, 0}}, {}, {}, "P1:0+4* P2:0+4*", "", 1},
                   {{}, {}, {}, "D1:4* !2", "", 1},
                   {{}, {}, {}, "D1:5*", "", 1},
                   {{}, {}, {}, "D1:6*", "1:length", 3},
                   {{}, {}, {}, "P2:0+5*", "", 1},
                   {{}, {}, {}, "D2:5*", "", 1},
                   {{}, {}, {}, "D2:6*", "2:length", 3},
               }});
  // Priority first (lower = more urgent), FCFS within a priority; one sequence at a time.
  v.push_back({"priority_then_fcfs", cfg(4, 64, 64, 1),
               {
                   {{{1, 2, 1, 0}, {2, 2, 1, 1}, {3, 2, 1, 0}, {4, 2, 1, -1}}, {}, {}, "P4:0+2*",
                    "4:length"},
                   {{{5, 2, 1, -1}}, {}, {}, "P5:0+2*", "5:length"},
                   {{}, {}, {}, "P1:0+2*", "1:length"},
                   {{}, {}, {}, "P3:0+2*", "3:length"},
                   {{}, {}, {}, "P2:0+2*", "2:length"},
               }});
  // Cancellation in every state frees every block: waiting (2), running mid-decode (1),
  // running (3), and the allocator is full again.
  v.push_back({"cancel_frees_blocks", cfg(4, 16, 8, 4),
               {
                   {{{1, 10, 5}, {2, 3, 5}, {3, 6, 5}}, {}, {}, "P1:0+8", "", 13},
                   {{}, {2}, {}, "P1:8+2* P3:0+6*", "2:abort", 11},
                   {{}, {1}, {}, "D3:6*", "1:abort", 14},
                   {{}, {3}, {}, "", "3:abort", 16},
               }});
  // A preempted (waiting, no blocks) sequence can be cancelled too.
  v.push_back({"cancel_preempted", cfg(4, 3, 64, 4),
               {
                   {{{1, 4, 4, 0}, {2, 4, 4, 1}}, {}, {}, "P1:0+4* P2:0+4*", "", 1},
                   {{}, {}, {}, "D1:4* !2", "", 1},
                   {{}, {2}, {}, "D1:5*", "2:abort", 1},
                   {{}, {}, {}, "D1:6*", "1:length", 3},
               }});
  // Requests that can never run are rejected alone: 35 tokens > 8 blocks of 4 (id 1), 41 tokens
  // > max_model_len 40 (id 3), an empty prompt (id 4), max_tokens 0 (id 5); id 2 runs.
  v.push_back({"reject_too_large_alone", cfg(4, 8, 64, 4, 40),
               {
                   {{{1, 30, 5}, {2, 3, 1}, {3, 38, 3}, {4, 0, 3}, {5, 3, 0}}, {}, {}, "P2:0+3*",
                    "1:rejected 3:rejected 4:rejected 5:rejected 2:length", 8},
               }});
  // Chunking off: whole prompts only; a prompt over the budget is rejected; the next prompt
  // waits for a step with room (decodes still go first).
  v.push_back({"no_chunking", cfg(4, 64, 8, 4, 256, false),
               {
                   {{{1, 6, 2}, {2, 5, 1}, {3, 9, 1}}, {}, {}, "P1:0+6*", "3:rejected"},
                   {{}, {}, {}, "D1:6* P2:0+5*", "1:length 2:length"},
               }});
  // Chunking off, but a recomputation (3 prompt + 2 outputs = 5 tokens) larger than the 4-token
  // budget is chunked anyway, or it could never run again (the chunk stops short of the last
  // sampled token when the budget ends there).
  v.push_back({"no_chunking_recompute_is_chunked", cfg(4, 3, 4, 4, 256, false),
               {
                   {{{1, 4, 8, 0}, {2, 3, 4, 1}}, {}, {}, "P1:0+4*", "", 2},
                   {{}, {}, {}, "D1:4* P2:0+3*", "", 0},
                   {{}, {}, {}, "D1:5* D2:3*", "", 0},
                   {{}, {}, {}, "D1:6* !2", "", 1},
                   {{}, {}, {}, "D1:7*", "", 1},
                   {{}, {}, {}, "D1:8*", "", 0},
                   {{}, {}, {}, "D1:9*", "", 0},
                   {{}, {}, {}, "D1:10*", "1:length", 3},
                   {{}, {}, {}, "P2:0+4", "", 1},
                   // Position 4 (the last sampled token) is left: that is an ordinary decode.
                   {{}, {}, {}, "D2:4*", "", 1},
                   {{}, {}, {}, "D2:5*", "2:length", 3},
               }});
  // Stop conditions: eos id (1), a stop token sequence 50,51 (2, with a false start 50,7),
  // max_tokens (3).
  v.push_back({"stops", cfg(4, 64, 64, 4),
               {
                   {{{1, 3, 10, 0, {2}}, {2, 3, 10, 0, {}, {{50, 51}}}, {3, 2, 3}}, {}, {{2, 50}},
                    "P1:0+3* P2:0+3* P3:0+2*", ""},
                   {{}, {}, {{1, 2}, {2, 7}}, "D1:3* D2:3* D3:2*", "1:stop"},
                   {{}, {}, {{2, 50}}, "D2:4* D3:3*", "3:length"},
                   {{}, {}, {{2, 51}}, "D2:5*", "2:stop"},
               }});
  return v;
}

TEST(SchedulerTable, AllCases) {
  for (const Case& c : cases()) run_case(c);
}

TEST(Scheduler, StopCheckCallbackForStopStrings) {
  Scheduler s(cfg(4, 16, 64, 4));
  Request r = make_request({1, 3, 10}, 0);
  r.stop.stop_strings = {"END"};
  s.add_request(r);
  // Stand-in detokeniser: token 105 renders as "END".
  s.set_stop_check([](const Sequence& q) { return !q.request.stop.stop_strings.empty() && q.output.back() == 105; });
  TableExecutor exec(s.config());
  int steps = 0;
  while (s.has_unfinished()) {
    StepBatch b = s.schedule();
    s.on_step_done(b, exec.execute(b));
    ++steps;
  }
  auto fin = s.drain_finished();
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(fin[0].output, (std::vector<TokenId>{103, 104, 105}));
  EXPECT_EQ(steps, 3);
}

TEST(Scheduler, CancelBetweenScheduleAndDoneIsSkipped) {
  Scheduler s(cfg(4, 16, 64, 4));
  s.add_request(make_request({1, 5, 4}, 0));
  s.add_request(make_request({2, 5, 4}, 0));
  TableExecutor exec(s.config());
  StepBatch b = s.schedule();
  StepResult res = exec.execute(b);
  EXPECT_TRUE(s.cancel(1));
  EXPECT_FALSE(s.cancel(1));
  EXPECT_FALSE(s.cancel(99));
  const StepOutcome out = s.on_step_done(b, res);
  ASSERT_EQ(out.tokens.size(), 1u);
  EXPECT_EQ(out.tokens[0].seq_id, 2);
  EXPECT_EQ(s.num_free_blocks(), 14);
  EXPECT_THROW(s.add_request(make_request({2, 5, 4}, 0)), Error);  // duplicate id
}

// Hand-over between schedulers (a Nitsum pool moving requests between instances,
// cluster/pool.h): the state travels with the sequence, its blocks leave one side and are
// reserved on the other; one the receiver cannot hold now is preempted (recomputed there), one
// it could never hold is rejected, never left waiting forever.
TEST(Scheduler, ExtractAndAdoptHandOverRequestsWithTheirState) {
  Scheduler a(cfg(4, 16, 64, 4)), b(cfg(4, 16, 64, 4)), tight(cfg(4, 5, 64, 4)), tiny(cfg(4, 2, 64, 4, 8));
  a.add_request(make_request({1, 5, 6}, 0));
  a.add_request(make_request({2, 7, 6}, 0));
  TableExecutor exec(a.config());
  StepBatch s0 = a.schedule();  // both prompts in one step, each samples its first token
  a.on_step_done(s0, exec.execute(s0));
  a.add_request(make_request({3, 4, 2}, 0));
  ASSERT_EQ(a.num_used_blocks(), 2 + 2);  // 5 and 7 prompt tokens in blocks of 4
  // A running sequence: its K/V's extent, its output and its place in the decode order.
  std::optional<Sequence> x = a.extract(1);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->num_computed, 5);
  EXPECT_EQ(x->output, (std::vector<TokenId>{105}));  // TableExecutor samples 100 + position
  EXPECT_EQ(a.find(1), nullptr);
  EXPECT_EQ(a.num_used_blocks(), 2);
  EXPECT_FALSE(a.extract(1).has_value());
  EXPECT_TRUE(b.adopt(std::move(*x)));
  EXPECT_EQ(b.num_running(), 1);
  EXPECT_EQ(b.num_used_blocks(), 2);  // its 6 tokens
  StepBatch s1 = b.schedule();
  ASSERT_EQ(s1.seqs.size(), 1u);
  EXPECT_EQ(s1.seqs[0].seq_id, 1);
  EXPECT_EQ(s1.seqs[0].start, 5);
  EXPECT_EQ(s1.seqs[0].num_tokens, 1);
  EXPECT_FALSE(s1.seqs[0].is_prefill);
  EXPECT_EQ(s1.seqs[0].token_ids, (std::vector<TokenId>{105}));
  StepResult r1;
  r1.sampled.push_back({1, 106});  // its K/V moved with it (the pool's migration): b's step samples
  b.on_step_done(s1, r1);
  EXPECT_EQ(b.find(1)->output, (std::vector<TokenId>{105, 106}));
  // A waiting one: no K/V to move, queued.
  std::optional<Sequence> w = a.extract(3);
  ASSERT_TRUE(w.has_value());
  EXPECT_FALSE(b.adopt(std::move(*w)));
  EXPECT_EQ(b.num_waiting(), 1);
  // Seq 2 (8 tokens: 2 blocks) into a cache of 5 blocks, 4 of them held by another: preempted.
  tight.add_request(make_request({9, 13, 2}, 0));
  StepBatch t0 = tight.schedule();
  tight.on_step_done(t0, exec.execute(t0));
  std::optional<Sequence> y = a.extract(2);
  ASSERT_TRUE(y.has_value());
  EXPECT_FALSE(tight.adopt(*y));
  ASSERT_NE(tight.find(2), nullptr);
  EXPECT_EQ(tight.find(2)->num_computed, 0);
  EXPECT_EQ(tight.find(2)->status, SeqStatus::kPreempted);
  EXPECT_EQ(tight.num_preemptions(), 1);
  // Into a scheduler whose max_model_len (8) it exceeds (7 + 6 tokens): rejected, finished.
  EXPECT_FALSE(tiny.adopt(std::move(*y)));
  EXPECT_EQ(tiny.find(2), nullptr);
  const std::vector<Sequence> fin = tiny.drain_finished();
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].finish_reason, FinishReason::kRejected);
  EXPECT_NE(fin[0].finish_detail.find("exceeds max_model_len 8"), std::string::npos) << fin[0].finish_detail;
  EXPECT_THROW(b.adopt(*b.find(1)), Error);  // already live there
  EXPECT_EQ(a.num_used_blocks(), 0);
}

TEST(Scheduler, ConfigValidation) {
  EXPECT_THROW(Scheduler(cfg(4, 0, 64, 4)), Error);
  EXPECT_THROW(Scheduler(cfg(0, 4, 64, 4)), Error);
  EXPECT_THROW(Scheduler(cfg(4, 4, 0, 4)), Error);
  EXPECT_THROW(Scheduler(cfg(4, 4, 64, 0)), Error);
  EXPECT_THROW(Scheduler(cfg(4, 4, 64, 4, 256, true, 1.0)), Error);
}

// Property test through the shared loop: random load on random small caches. Every accepted
// request ends with exactly max_tokens outputs (no eos), rejected ones are exactly those that
// cannot fit, steps respect the budget and seat limit, the fake KV stays consistent (checked by
// TableExecutor), and the allocator is full at the end.
TEST(Scheduler, RandomLoadAlwaysDrains) {
  Rng rng(12345);
  for (int trial = 0; trial < 60; ++trial) {
    SchedulerConfig c = cfg(1 + int(rng.below(8)), 2 + int(rng.below(40)), 1 + int(rng.below(40)),
                            1 + int(rng.below(6)), 40 + int(rng.below(100)), rng.below(4) != 0,
                            rng.below(2) ? 0.0 : 0.1);
    Scheduler s(c);
    TableExecutor exec(c);
    ManualClock clock;
    exec.clock = &clock;
    Metrics metrics;
    std::vector<Request> arrivals;
    std::map<RequestId, bool> fits;
    const int n = 1 + int(rng.below(25));
    for (int i = 0; i < n; ++i) {
      Add a{i + 1, 1 + int(rng.below(60)), 1 + int(rng.below(30)), int(rng.below(3))};
      Request r = make_request(a, double(rng.below(20)));
      const int total = a.prompt + a.max_tokens;
      fits[a.id] = total <= c.max_model_len &&
                   (total + c.block_size - 1) / c.block_size <= c.num_blocks &&
                   (c.enable_chunked_prefill || a.prompt <= c.max_tokens_per_step);
      arrivals.push_back(std::move(r));
    }
    EngineLoop loop(s, exec, clock, metrics);
    std::map<RequestId, int> outputs;
    loop.on_batch = [&](const StepBatch& b) {
      ASSERT_LE(b.num_tokens, c.max_tokens_per_step);
      ASSERT_LE(int(b.seqs.size()), c.max_num_seqs);
    };
    loop.on_finish = [&](const Sequence& q) {
      if (fits[q.id()]) {
        EXPECT_EQ(q.finish_reason, FinishReason::kLength) << "trial " << trial << " id " << q.id();
        EXPECT_EQ(q.num_output(), q.request.max_tokens);
      } else {
        EXPECT_EQ(q.finish_reason, FinishReason::kRejected) << "trial " << trial << " id " << q.id();
      }
      outputs[q.id()] = q.num_output();
    };
    for (Request& r : arrivals) loop.add_arrival(std::move(r));
    loop.run_until_idle();
    EXPECT_EQ(int(outputs.size()), n) << "trial " << trial;
    EXPECT_EQ(s.num_free_blocks(), c.num_blocks) << "trial " << trial;
    EXPECT_EQ(int(metrics.requests().size()), n);
    if (HasFailure()) break;
  }
}

// The loop takes its plan control at construction (StepPlanner) and calls it once per step,
// between schedule and execute; on_batch only observes, after the choice: the executor and the
// observer both see the plan the planner set, and an observer cannot displace the planner.
TEST(EngineLoop, PlannerChoosesObserversSee) {
  struct Alternating final : StepPlanner {
    int calls = 0;
    void choose_plan(StepBatch& b) override {
      b.plan_id = calls % 2;
      b.plan = calls % 2 ? "odd" : "even";
      ++calls;
    }
  };
  struct Recording final : StepExecutor {
    std::vector<int> plan_ids;
    StepResult execute(const StepBatch& b) override {
      plan_ids.push_back(b.plan_id);
      StepResult r;
      for (const ScheduledSeq& e : b.seqs)
        if (e.sample) r.sampled.push_back({e.seq_id, TokenId(7)});
      return r;
    }
    void release(RequestId) override {}
  };
  const SchedulerConfig c = cfg(4, 64, 64, 4);
  Scheduler s(c);
  Recording exec;
  ManualClock clock;
  Metrics metrics;
  Alternating planner;
  EngineLoop loop(s, exec, clock, metrics, &planner);
  std::vector<std::string> seen;
  loop.on_batch = [&](const StepBatch& b) { seen.push_back(b.plan); };
  loop.add_arrival(make_request({1, 5, 4}, 0));
  const int64_t steps = loop.run_until_idle();
  // 5 prompt tokens in one step (budget 64), then 3 decode steps: 4 tokens out.
  ASSERT_EQ(steps, 4);
  EXPECT_EQ(planner.calls, 4);
  EXPECT_EQ(exec.plan_ids, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(seen, (std::vector<std::string>{"even", "odd", "even", "odd"}));
}

}  // namespace
}  // namespace loom
