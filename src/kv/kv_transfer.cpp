#include "kv/kv_transfer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "core/clock.h"
#include "core/error.h"

namespace loom {

namespace {

using CellKey = std::tuple<int64_t, int, int, int64_t>;  // seq, layer, kv head, block

CellKey cell_of(const KvMove& m) { return {m.seq_id, m.layer, m.kv_head, m.block}; }

// The moves of one round, grouped by peer, in migration order.
struct Round {
  std::vector<size_t> sends;                  // moves this rank sends, dst ascending
  std::vector<std::vector<size_t>> recv_from;  // [src] moves this rank receives from src
};

}  // namespace

KvTransferStats execute_kv_migration(const KvMigration& mig, const KvPlacement& to,
                                     const std::vector<SeqExtent>& seqs, KvStore& store, Communicator& group,
                                     const KvTransferOptions& options, KvTransferScratch* scratch,
                                     const std::vector<int64_t>& parked) {
  KvTransferScratch local_scratch;
  KvTransferScratch& buffers = scratch ? *scratch : local_scratch;
  const double t0 = now_seconds();
  const int me = group.rank(), n = group.size();
  LOOM_CHECK(mig.block_tokens == store.block_size(), "migration cut at ", mig.block_tokens,
             "-token blocks, the KV store pages hold ", store.block_size());
  LOOM_CHECK(to.n_ranks() <= n, "placement of ", to.n_ranks(), " ranks over a group of ", n);
  const int64_t dh = store.head_dim(), B = store.block_size();
  KvTransferStats st;

  // --- the round schedule, the same on every rank: per sending rank, its moves in migration order
  // cut into rounds of at most buffer_bytes (a single larger move is a round of its own).
  const int64_t buffer = std::max<int64_t>(options.buffer_bytes, 1);
  std::vector<std::vector<std::vector<size_t>>> by_src{size_t(n)};  // [src][round] -> moves
  {
    std::vector<int64_t> fill(size_t(n), 0);
    for (size_t i = 0; i < mig.moves.size(); ++i) {
      const KvMove& m = mig.moves[i];
      LOOM_CHECK(m.src >= 0 && m.src < n && m.dst >= 0 && m.dst < n && m.src != m.dst, "move ", m.src, "->", m.dst);
      auto& rounds = by_src[size_t(m.src)];
      const int64_t b = mig.move_bytes(m);
      if (rounds.empty() || !options.aggregate || fill[size_t(m.src)] + b > buffer) {
        rounds.emplace_back();
        fill[size_t(m.src)] = 0;
      }
      rounds.back().push_back(i);
      fill[size_t(m.src)] += b;
    }
  }
  int n_rounds = 0;
  for (const auto& r : by_src) n_rounds = std::max(n_rounds, int(r.size()));
  st.rounds = n_rounds;
  std::vector<Round> rounds{size_t(n_rounds)};
  for (int k = 0; k < n_rounds; ++k) {
    Round& r = rounds[size_t(k)];
    r.recv_from.resize(size_t(n));
    if (k < int(by_src[size_t(me)].size())) r.sends = by_src[size_t(me)][size_t(k)];
    for (int s = 0; s < n; ++s) {
      if (k >= int(by_src[size_t(s)].size())) continue;
      for (size_t i : by_src[size_t(s)][size_t(k)])
        if (mig.moves[i].dst == me) r.recv_from[size_t(s)].push_back(i);
    }
  }

  // --- cells this rank sends: how many moves still read each (pages are freed after the last).
  std::map<CellKey, int> pending_sends;
  for (const KvMove& m : mig.moves)
    if (m.src == me) ++pending_sends[cell_of(m)];
  // Cells it loses and sends to nobody go at once (lower peak memory while receiving).
  auto still_held = [&](int64_t seq, int l, int h, int64_t block) { return to.stores(me, l, h, seq, block * B); };
  for (const SeqExtent& s : seqs)
    for (int l = 0; l < store.n_layers(); ++l)
      for (int h = 0; h < store.n_kv_heads(); ++h) {
        const std::span<const int32_t> t = store.table(s.id, l, h);
        for (int64_t b = int64_t(t.size()) - 1; b >= 0; --b) {
          if (t[size_t(b)] == kNoPage || still_held(s.id, l, h, b) || pending_sends.count({s.id, l, h, b})) continue;
          store.drop(s.id, l, h, b);
          ++st.pages_freed;
        }
      }

  // --- double-buffered rounds: pack k while k-1 is on the wire, then unpack k-1.
  auto move_floats = [&](const KvMove& m) { return m.tokens.size() * dh; };  // per K (or V)
  Device& dev = store.device();
  const int64_t pf = store.page_floats();
  DeviceArray<float>* send_buf = buffers.send;
  DeviceArray<float>* recv_buf = buffers.recv;
  for (int i = 0; i < 2; ++i) {
    send_buf[i].bind(dev);
    recv_buf[i].bind(dev);
  }
  std::vector<CopySpan> k_spans, v_spans;
  std::vector<KvMove> to_drop;
  const size_t nr = static_cast<size_t>(n);
  std::vector<size_t> send_bytes(nr), send_displs(nr), recv_bytes(nr), recv_displs(nr);
  std::unique_ptr<CommRequest> inflight[2];

  auto pack = [&](int k) {
    const Round& r = rounds[size_t(k)];
    DeviceArray<float>& buf = send_buf[k % 2];
    std::fill(send_bytes.begin(), send_bytes.end(), 0);
    std::fill(send_displs.begin(), send_displs.end(), 0);
    int64_t total = 0;
    for (size_t i : r.sends) total += mig.move_bytes(mig.moves[i]);
    buf.resize(size_t(total) / sizeof(float));
    int64_t at = 0;  // floats into buf
    k_spans.clear();
    v_spans.clear();
    to_drop.clear();
    size_t off = 0;
    int prev_dst = -1;
    for (size_t i : r.sends) {
      const KvMove& m = mig.moves[i];
      if (m.dst != prev_dst) send_displs[size_t(m.dst)] = off, prev_dst = m.dst;
      const int32_t page = store.page(m.seq_id, m.layer, m.kv_head, m.block);
      LOOM_CHECK(page != kNoPage, "rank ", me, " is the source of layer ", m.layer, " kv head ", m.kv_head,
                 " of sequence ", m.seq_id, " block ", m.block, " but holds no page for it");
      const int64_t in_block = m.tokens.begin - m.block * B, nf = move_floats(m);
      k_spans.push_back({at, int64_t(page) * pf + in_block * dh, nf});
      v_spans.push_back({at + nf, int64_t(page) * pf + in_block * dh, nf});
      at += 2 * nf;
      const size_t b = size_t(2 * nf) * sizeof(float);
      send_bytes[size_t(m.dst)] += b;
      off += b;
      st.bytes_sent += int64_t(b);
      ++st.moves_sent;
      // The page's last outgoing move is packed: free it unless this rank keeps the cell.
      auto it = pending_sends.find(cell_of(m));
      if (--it->second == 0) {
        pending_sends.erase(it);
        if (!still_held(m.seq_id, m.layer, m.kv_head, m.block)) to_drop.push_back(m);
      }
    }
    // The copies are issued before the pages are freed (a page freed here may be refilled by the
    // next unpack: the device runs the two in this order).
    dev.copy_spans(buf.data(), store.k_pages(), k_spans);
    dev.copy_spans(buf.data(), store.v_pages(), v_spans);
    for (const KvMove& m : to_drop) {
      store.drop(m.seq_id, m.layer, m.kv_head, m.block);
      ++st.pages_freed;
    }
    std::fill(recv_bytes.begin(), recv_bytes.end(), 0);
    std::fill(recv_displs.begin(), recv_displs.end(), 0);
    size_t roff = 0;
    for (int s = 0; s < n; ++s) {
      recv_displs[size_t(s)] = roff;
      for (size_t i : r.recv_from[size_t(s)]) recv_bytes[size_t(s)] += size_t(mig.move_bytes(mig.moves[i]));
      roff += recv_bytes[size_t(s)];
    }
    recv_buf[k % 2].resize(roff / sizeof(float));
    inflight[k % 2] = group.start_all_to_all_v_bytes(buf.data(), send_bytes, send_displs, recv_buf[k % 2].data(),
                                                     recv_bytes, recv_displs);
  };
  // A round's cells go into fresh pages; when the store has too few free pages for them (the
  // rank still holds cells it has yet to send), the round waits in its buffer until every send is
  // packed and its pages freed (the new placement fits the store: the scheduler's pools say so).
  std::vector<std::pair<int, DeviceArray<float>>> deferred;
  auto place = [&](int k, const DeviceArray<float>& buf) {
    const Round& r = rounds[size_t(k)];
    int64_t at = 0;
    k_spans.clear();
    v_spans.clear();
    for (int s = 0; s < n; ++s)
      for (size_t i : r.recv_from[size_t(s)]) {
        const KvMove& m = mig.moves[i];
        const int32_t page = store.ensure_page(m.seq_id, m.layer, m.kv_head, m.block);
        const int64_t in_block = m.tokens.begin - m.block * B, nf = move_floats(m);
        k_spans.push_back({int64_t(page) * pf + in_block * dh, at, nf});
        v_spans.push_back({int64_t(page) * pf + in_block * dh, at + nf, nf});
        at += 2 * nf;
        st.bytes_received += 2 * nf * int64_t(sizeof(float));
        ++st.moves_received;
      }
    dev.copy_spans(store.k_pages(), buf.data(), k_spans);
    dev.copy_spans(store.v_pages(), buf.data(), v_spans);
  };
  auto new_pages = [&](int k) {
    std::vector<CellKey> cells;
    for (int s = 0; s < n; ++s)
      for (size_t i : rounds[size_t(k)].recv_from[size_t(s)]) {
        const KvMove& m = mig.moves[i];
        if (store.page(m.seq_id, m.layer, m.kv_head, m.block) == kNoPage) cells.push_back(cell_of(m));
      }
    std::sort(cells.begin(), cells.end());
    return int64_t(std::unique(cells.begin(), cells.end()) - cells.begin());
  };
  auto unpack = [&](int k) {
    inflight[k % 2]->wait();
    inflight[k % 2].reset();
    if (!deferred.empty() || new_pages(k) > store.free_pages()) {
      deferred.emplace_back(k, std::move(recv_buf[k % 2]));
      recv_buf[k % 2].bind(dev);
      return;
    }
    place(k, recv_buf[k % 2]);
  };
  for (int k = 0; k < n_rounds; ++k) {
    pack(k);
    if (k > 0) unpack(k - 1);
  }
  if (n_rounds > 0) unpack(n_rounds - 1);
  for (const auto& [k, buf] : deferred) place(k, buf);
  st.deferred_rounds = int(deferred.size());
  LOOM_CHECK(pending_sends.empty(), "rank ", me, ": ", pending_sends.size(), " cells were never sent");

  // --- 4. the store against the new placement (what the rank actually holds).
  if (options.all_sequences)
    for (int64_t seq : store.sequences()) {
      const bool known = std::any_of(seqs.begin(), seqs.end(), [&](const SeqExtent& s) { return s.id == seq; }) ||
                         std::find(parked.begin(), parked.end(), seq) != parked.end();
      LOOM_CHECK(known, "rank ", me, " holds KV of sequence ", seq, ", which the migration did not list");
    }
  const std::string bad = check_holdings(store, to, me, seqs);
  LOOM_CHECK(bad.empty(), "after the KV migration: ", bad);
  st.seconds = now_seconds() - t0;
  return st;
}

int64_t migration_new_pages(const KvMigration& mig, int me, const KvStore& store) {
  std::vector<CellKey> cells;
  for (const KvMove& m : mig.moves)
    if (m.dst == me && store.page(m.seq_id, m.layer, m.kv_head, m.block) == kNoPage) cells.push_back(cell_of(m));
  std::sort(cells.begin(), cells.end());
  return int64_t(std::unique(cells.begin(), cells.end()) - cells.begin());
}

}  // namespace loom
