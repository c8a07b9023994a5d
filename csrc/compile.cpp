// The set compile's helpers (see compile.h).
#include "compile.h"

namespace trierouter {

void plan_chunks(std::vector<Chunk>& chunks, const int32_t* lcps, size_t nv) {
    const size_t n = chunks.size(), w = nv / (8 * n);
    size_t prev = 0;
    for (size_t c = 1; c < n; ++c) {
        const size_t ideal = nv * c / n;
        size_t best = ideal;
        for (size_t i = ideal - w; i <= ideal + w; ++i) {
            const bool shorter = lcps[i] < lcps[best];
            const size_t di = i > ideal ? i - ideal : ideal - i, db = best > ideal ? best - ideal : ideal - best;
            if (shorter || (lcps[i] == lcps[best] && di < db)) best = i;
        }
        chunks[c - 1].b = prev;
        chunks[c - 1].e = best;
        prev = best;
    }
    chunks[n - 1].b = prev;
    chunks[n - 1].e = nv;
}

void walked_depths(const int32_t* lcp, int64_t n, int64_t max_keys, int32_t* out) {
    std::vector<int64_t> dq;  // indices of increasing lcp over the window (i, i + max_keys]
    size_t head = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
        // i + 1 enters, indices past i + max_keys leave (the oldest, at the head); an entry whose
        // lcp is not below the newcomer's can never be the minimum again
        if (i + 1 < n) {
            while (dq.size() > head && lcp[dq.back()] >= lcp[i + 1]) dq.pop_back();
            dq.push_back(i + 1);
        }
        while (dq.size() > head && dq[head] > i + max_keys) ++head;
        const int64_t thr = (i + max_keys >= n) ? -1 : lcp[dq[head]];
        out[i] = static_cast<int32_t>(std::max<int64_t>(lcp[i] + 1, thr + 1));
    }
}

CompileStatus compile_set(CompileInput& in, CompileOutput& o, Lap& lap) {
#define LAP(name) lap.mark(name)
    Buf<Str>& strs = in.strs;
    Buf<uint8_t>& joined = in.joined;
    const TokenTrie* tri = in.tri;
    const int64_t tl = in.tl;
    const std::vector<int32_t>& eos = in.eos;
    const int allow_end = in.allow_end ? 1 : 0;
    const long long max_keys = in.max_keys, threads = in.threads, split_min = in.split_min;
    Buf<uint8_t> relocated, relocated2;  // the strings in sorted order (when they were not)
    relocated.huge_min = relocated2.huge_min = BIG_VEC_MIN;
    bool sorted = true;
    for (size_t i = 1; i < strs.size() && sorted; ++i)
        if (str_less(strs[i], strs[i - 1])) sorted = false;
    if (!sorted) {
        size_t split_at = 0;
        try {
            const bool split = chunk_count(static_cast<int64_t>(strs.size()), threads, split_min) > 1;
            split_at = sort_values_split(strs.data(), strs.size(), &relocated, &relocated2, split);
        } catch (const std::bad_alloc&) {
            return CompileStatus::kNoMemory;
        }
        // the strings are read from ``relocated`` (and ``relocated2``, when split) now
        if (relocated.p && (relocated2.p || !split_at)) joined.release();
    }
    {
        size_t w = 0;
        for (size_t i = 0; i < strs.size(); ++i)
            if (w == 0 || !str_eq(strs[i], strs[w - 1])) strs[w++] = strs[i];
        strs.n = w;
    }
    const size_t nv = strs.size();
    LAP("sort");
    const int64_t n_chunks = chunk_count(static_cast<int64_t>(nv), threads, split_min);
    Buf<int32_t>& lcps = o.lcps;
    // each value's common prefix with the previous one, in the chunks' threads (for the compact
    // layout's rule, or to plan the chunks; one thread alone computes them in the trie pass)
    auto fill_lcps = [&]() {
        return run_chunks(n_chunks, [&](int64_t c) {
            const size_t b = static_cast<size_t>(nv * c / n_chunks), e = static_cast<size_t>(nv * (c + 1) / n_chunks);
            for (size_t i = b; i < e; ++i) lcps[i] = static_cast<int32_t>(i ? common_prefix(strs[i - 1], strs[i]) : 0);
        });
    };
    // The compact layout: each key's common prefix with the previous one first, then the depth
    // from which the nodes a key adds have at most max_keys keys below (compact_layout's rule);
    // their rows are neither counted nor written. Not where a byte has no single-byte token: the
    // pruning below needs every row (the layout is then derived from the full one).
    Buf<int32_t> walk_from;
    Buf<uint8_t> walked;
    bool compact = max_keys > 0;
    // a compact set's arrays (and its temporaries) get pages of their own from 64 KB: freed, they
    // go back at once, where malloc's heap kept them (RSS 6 -> 14 MB over 4 compiles at 100,000)
    constexpr size_t PAGES_FROM = size_t(64) << 10;
    if (compact) {
        uint8_t seen[256] = {0};
        for (auto& s : strs)
            for (int64_t q = 0; q < s.n; ++q) seen[s.p[q]] = 1;
        for (int b = 0; b < 256; ++b) compact = compact && !(seen[b] && !tri->single[b]);
    }
    if (compact) {
        lcps.pages_from = walk_from.pages_from = walked.pages_from = PAGES_FROM;
        if (!lcps.resize(nv) || !walk_from.resize(nv) || !fill_lcps()) {
            return CompileStatus::kNoMemory;
        }
        walked_depths(lcps.p, static_cast<int64_t>(nv), max_keys, walk_from.p);
    }
    // Trie in preorder, built string by string (path[d]: node at depth d on the current string),
    // and at once the Aho-Corasick state of every node (st[d] on the path): the tokens that end
    // at node m are the outputs of its state, and a token of length L ending at m starts at the
    // ancestor path[depth(m) - L]. This first pass counts each row's pairs; the second fills them.
    //
    // Large sets are split into chunks of consecutive values, one per thread (run_chunks), in
    // both passes. A chunk's nodes are numbered from the nodes of the chunks before it (from the
    // values' common prefixes), and its walk starts on the path its first value shares with the
    // previous chunk. Those shared ancestors belong to an earlier chunk: a chunk counts the
    // pairs it adds to them apart (by depth) and writes them apart, and they are added and their
    // rows sorted once the chunks are done. The arrays are those of one walk, bit for bit.
    const TT tt(tri);
    const bool use_memo = tri->n_nodes < (int32_t{1} << 24);  // the key holds state << 8
    size_t total_bytes = 0;
    int64_t max_len = 0;
    for (auto& s : strs) {
        total_bytes += static_cast<size_t>(s.n);
        max_len = std::max(max_len, s.n);
    }
    if (total_bytes >= (size_t(1) << 31) - 4) {
        return CompileStatus::kTooManyNodes;
    }
    Buf<int32_t>&ends = o.ends, &row_ptr = o.row_ptr;
    Spans state_of(tri);  // per node, its outputs span
    Buf<uint8_t>& vbytes = o.vbytes;
    Buf<int64_t>& voff = o.voff;
    if (compact) ends.pages_from = row_ptr.pages_from = vbytes.pages_from = voff.pages_from = PAGES_FROM;
    // row_ptr first counts the pairs of row v in row_ptr[v + 1]
    bool ok = ends.resize(nv) && vbytes.reserve(total_bytes - nv * static_cast<size_t>(tl) + 1) &&
              voff.resize(nv + 1) && state_of.resize(total_bytes + 1) && lcps.resize(nv) &&
              row_ptr.resize(total_bytes + 4) &&  // zeroed per node as nodes are made
              (!compact || walked.resize(total_bytes + 3));
    if (!ok) {
        return CompileStatus::kNoMemory;
    }
    std::vector<Chunk> chunks(static_cast<size_t>(n_chunks));
    if (n_chunks > 1) {
        // the values' common prefixes (unless the compact layout has them), then the chunks:
        // where they start (a short common prefix near an even split), their first node ids
        // and byte offsets, and the shared ancestors' ids
        if (!compact && !fill_lcps()) {
            return CompileStatus::kNoMemory;
        }
        plan_chunks(chunks, lcps.p, nv);
        voff[0] = 0;
        int64_t node = 1;
        size_t c = 0;
        for (size_t i = 0; i < nv; ++i) {
            if (c < chunks.size() && chunks[c].b == i) chunks[c++].sid = static_cast<int32_t>(node);
            node += strs[i].n - lcps[i];
            voff[i + 1] = voff[i] + strs[i].n - tl;
        }
        for (size_t k = 1; k < chunks.size(); ++k) {
            Chunk& ck = chunks[k];
            ck.own = ck.sid;
            ck.need = lcps[ck.b];
            ck.path0.assign(static_cast<size_t>(ck.need) + 1, 0);
            // the node at depth d on value b - 1's path: made by the last value j < b with
            // lcps[j] < d, as its (d - lcps[j])-th node
            int64_t hi = ck.need, first = ck.sid;
            for (size_t j = ck.b; hi > 0 && j-- > 0;) {
                first -= strs[j].n - lcps[j];
                for (int64_t d = lcps[j] + 1; d <= hi; ++d)
                    ck.path0[static_cast<size_t>(d)] = static_cast<int32_t>(first + d - lcps[j] - 1);
                hi = std::min<int64_t>(hi, lcps[j]);
            }
            ck.side.assign(static_cast<size_t>(ck.need) + 1, 0);
        }
    } else {
        chunks[0].e = nv;
    }
    chunks[0].path0.assign(1, 0);  // the root, its own
    const bool lcps_ready = compact || n_chunks > 1;
    int32_t* cnt = row_ptr.p + 1;
    row_ptr[0] = 0;
    cnt[0] = 0;
    uint8_t* wk = compact ? walked.p : nullptr;  // per node: its row is walked (not stored)
    if (wk) wk[0] = static_cast<int64_t>(nv) <= max_keys;
    state_of.set(0, 0, 0);
    auto trie_chunk = [&](int64_t c) {
        Chunk& ck = chunks[static_cast<size_t>(c)];
        std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0), st(static_cast<size_t>(max_len) + 2, 0);
        std::vector<GoMemo> memo(size_t(1) << GO_MEMO_BITS, GoMemo{0, 0, 0, 0, 0});  // key 0: empty
        for (int64_t d = 0; d <= ck.need; ++d) path[static_cast<size_t>(d)] = ck.path0[static_cast<size_t>(d)];
        for (int64_t d = 1; d <= ck.need; ++d)
            st[static_cast<size_t>(d)] = tt.go(st[static_cast<size_t>(d - 1)], strs[ck.b].p[d - 1]);
        const int32_t own = ck.own;
        int64_t* side = ck.side.data();
        // a pair into ancestor a (at depth da): counted in its row, or apart if it is shared
        // (then whether its row is walked is read after the chunks: an earlier chunk marks it)
        auto count = [&](int32_t a, int64_t da, int32_t x) {
            if (a >= own)
                cnt[a] += x;
            else
                side[da]++;
        };
        uint8_t* used = ck.used;
        int32_t next = ck.sid;
        Str prev = ck.b ? strs[ck.b - 1] : Str{nullptr, 0};
        size_t vat = ck.b ? static_cast<size_t>(voff[ck.b]) : 0;
        if (n_chunks == 1) voff[0] = 0;
        for (size_t i = ck.b; i < ck.e; ++i) {
            const Str& s = strs[i];
            if (i + 8 < ck.e) __builtin_prefetch(strs[i + 8].p);  // sorted order is not memory order
            int64_t l = 0;
            if (lcps_ready) {
                l = lcps[i];
            } else {
                l = common_prefix(prev, s);
                lcps[i] = static_cast<int32_t>(l);
            }
            for (int64_t d = l; d < s.n; ++d) {
                const int32_t id = next++;
                cnt[id] = 0;
                if (wk) wk[id] = d + 1 >= walk_from[i];
                const uint8_t b = s.p[d];
                used[b] = 1;
                // transition through a small direct-mapped memo: values repeat their words, so
                // most (state, byte) steps were taken before, and a hit reads no trie state
                const int32_t from = st[static_cast<size_t>(d)];
                const uint32_t key = (static_cast<uint32_t>(from) << 8 | b) + 1u;
                GoMemo own_e;
                GoMemo& e = use_memo ? memo[(key * 0x9E3779B1u) >> (32 - GO_MEMO_BITS)] : own_e;
                if (!use_memo || e.key != key) {
                    const int32_t qq = tt.go(from, b);
                    const int32_t lo = tt.si[qq].olo, hi = tt.si[qq].ohi;
                    uint64_t lens = 0;
                    if (hi - lo <= 8) {
                        for (int32_t j = lo; j < hi && lens != ~uint64_t(0); ++j) {
                            const int32_t L = tt.outs[j].len;
                            lens = L < 256 ? lens | static_cast<uint64_t>(L) << (8 * (j - lo)) : ~uint64_t(0);
                        }
                    } else {
                        lens = ~uint64_t(0);
                    }
                    e = {key, qq, lo, hi, lens};
                }
                const int32_t q = e.q, olo = e.olo, ohi = e.ohi;
                state_of.set(static_cast<size_t>(id), olo, ohi);
                path[static_cast<size_t>(d + 1)] = id;
                st[static_cast<size_t>(d + 1)] = q;
                if (wk) {  // only the stored rows are counted
                    for (int32_t j = olo; j < ohi; ++j) {
                        const int64_t da = d + 1 - tt.outs[j].len;
                        const int32_t a = path[static_cast<size_t>(da)];
                        count(a, da, a >= own && !wk[a]);
                    }
                } else if (e.lens != ~uint64_t(0)) {  // lengths from the memo: no read of the outputs table
                    for (uint64_t ls = e.lens; ls; ls >>= 8) {
                        const int64_t da = d + 1 - static_cast<int64_t>(ls & 0xFF);
                        count(path[static_cast<size_t>(da)], da, 1);
                    }
                } else {
                    for (int32_t j = olo; j < ohi; ++j) {
                        const int64_t da = d + 1 - tt.outs[j].len;
                        count(path[static_cast<size_t>(da)], da, 1);
                    }
                }
            }
            ends[i] = path[static_cast<size_t>(s.n)];
            const int64_t vl = s.n - tl;
            if (vl) std::memcpy(vbytes.p + vat, s.p, static_cast<size_t>(vl));
            vat += static_cast<size_t>(vl);
            if (n_chunks == 1) voff[i + 1] = voff[i] + vl;
            prev = s;
        }
        ck.nodes = next;
    };
    if (!run_chunks(n_chunks, trie_chunk)) {
        return CompileStatus::kNoMemory;
    }
    vbytes.n = static_cast<size_t>(voff[nv]);
    uint8_t used[256] = {0};
    for (const Chunk& ck : chunks) {
        for (int b = 0; b < 256; ++b) used[b] |= ck.used[b];
        for (size_t d = 0; d < ck.side.size(); ++d) {
            const int32_t a = ck.path0[d];
            if (!(wk && wk[a])) cnt[a] += static_cast<int32_t>(ck.side[d]);
        }
    }
    const int32_t next = chunks.back().nodes;
    LAP("trie");
    // the values' bytes are in vbytes now, and the passes below read only their lengths (from
    // voff): the pages go back before the rows are allocated (fewer fresh pages touched in all)
    relocated.release();
    relocated2.release();
    joined.release();
    strs.release();
    const int32_t n = next;
    const int32_t end_state = n, dead_state = n + 1;
    const int32_t n_eos = static_cast<int32_t>(eos.size());
    if (allow_end)
        for (size_t i = 0; i < nv; ++i) cnt[ends[i]] += (wk && wk[ends[i]]) ? 0 : n_eos;
    if (wk) wk[n] = wk[n + 1] = 0;  // END and DEAD are stored
    cnt[n] = n_eos;      // END
    cnt[n + 1] = n_eos;  // DEAD
    bool prune = false;
    for (int b = 0; b < 256; ++b)
        if (used[b] && !tri->single[b]) prune = true;
    row_ptr.n = static_cast<size_t>(n) + 3;
    int64_t total_pairs = 0;
    for (int32_t v = 0; v < n + 2; ++v) {  // exclusive scan: row_ptr[v] = start of row v
        const int32_t c = row_ptr[static_cast<size_t>(v) + 1];
        row_ptr[static_cast<size_t>(v)] = static_cast<int32_t>(total_pairs);
        total_pairs += c;
        if (total_pairs >= (int64_t(1) << 31)) {
            return CompileStatus::kTooManyPairs;
        }
    }
    // second pass: the same outputs, written into their rows (row_ptr[v] is row v's cursor,
    // and ends as the start of row v + 1: shifted back afterwards). Usually straight into the
    // serving arrays (token, child code); where some value may not be spellable, first as
    // (token, child) pairs that are pruned by reachability.
    Buf<int32_t>& tokens = o.tokens;
    Buf<uint16_t>& children = o.children;
    Buf<int32_t>&far_pos = o.far_pos, &far_child = o.far_child;
    if (compact) tokens.pages_from = children.pages_from = far_pos.pages_from = far_child.pages_from = PAGES_FROM;
    Buf<Pair> pairs;
    std::vector<NodePair> fars;
    ok = prune ? pairs.resize(static_cast<size_t>(total_pairs))
               : tokens.resize(static_cast<size_t>(total_pairs)) &&
                     children.resize(static_cast<size_t>(total_pairs));
    if (!ok) {
        return CompileStatus::kNoMemory;
    }
    int32_t* cur = row_ptr.p;
    std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0);
    auto second_pass = [&](auto emit) {
        int32_t id = 1;
        for (size_t i = 0; i < nv; ++i) {
            const int64_t len = voff[i + 1] - voff[i] + tl;
            for (int64_t d = lcps[i]; d < len; ++d) {
                const int32_t m = id++;
                path[static_cast<size_t>(d + 1)] = m;
                int32_t j, hi;
                state_of.get(static_cast<size_t>(m), &j, &hi);
                for (; j < hi; ++j)
                    emit(path[static_cast<size_t>(d + 1 - tt.outs[j].len)], tt.outs[j].token, m);
            }
        }
        if (allow_end)
            for (size_t i = 0; i < nv; ++i)
                for (int32_t e : eos) emit(ends[i], e, end_state);
        for (int32_t e : eos) emit(n, e, end_state);
        for (int32_t e : eos) emit(n + 1, e, end_state);
        std::memmove(row_ptr.p + 1, row_ptr.p, (static_cast<size_t>(n) + 2) * sizeof(int32_t));
        row_ptr[0] = 0;
    };
    if (!prune) {
        // the same walk, written out for the common case: rows are sorted as soon as they are
        // complete (when the walk leaves the node's subtree), while they are still in cache, and
        // the end ids of a value go into its row when the walk reaches its end
        int32_t* tk = tokens.p;
        uint16_t* ch = children.p;
        // a pair into row nd (not walked), its far child kept in ``far``
        auto put = [&](int32_t nd, int32_t t, int32_t m, std::vector<NodePair>& far) {
            const int32_t at = cur[nd]++;
            tk[at] = t;
            if (m == end_state) {
                ch[at] = TO_END;
            } else if (m - nd < FAR) {
                ch[at] = static_cast<uint16_t>(m - nd);
            } else {
                ch[at] = FAR;
                far.push_back({nd, t, m});
            }
        };
        int64_t max_id = tri->n_ids;
        for (int32_t e : eos) max_id = std::max(max_id, int64_t{e} + 1);
        const bool bits_fit = max_id <= (int64_t{1} << 24);  // else the radix sort alone
        auto sort_rows = [&](std::unique_ptr<IdBits>& big, int32_t lo, size_t len) {
            if (len > 16 && !big && bits_fit) big.reset(new IdBits(static_cast<size_t>(max_id)));
            sort_row2(tk + lo, ch + lo, len, big.get());
        };
        const Out* outs = tt.outs;
        auto emit_chunk = [&](int64_t c) {
            Chunk& ck = chunks[static_cast<size_t>(c)];
            const int32_t own = ck.own;  // rows below it: shared ancestors, written after the chunks
            auto emit = [&](int32_t nd, int32_t t, int32_t m) {
                if (wk && wk[nd]) return;
                if (nd < own)
                    ck.pend.push_back({nd, t, m});
                else
                    put(nd, t, m, ck.fars);
            };
            // the node at depth d of the path: its row starts at pstart[d] (its cursor when the
            // walk reached it: rows only receive pairs from nodes below them)
            std::vector<int32_t> path(static_cast<size_t>(max_len) + 2, 0), pstart(path.size(), 0);
            for (int64_t d = 0; d <= ck.need; ++d) path[static_cast<size_t>(d)] = ck.path0[static_cast<size_t>(d)];
            std::unique_ptr<IdBits> big;  // made for the first row of more than 16 pairs
            auto finish = [&](int64_t dd) {
                const int32_t v = path[static_cast<size_t>(dd)], lo = pstart[static_cast<size_t>(dd)];
                if (v < own) return;  // a shared ancestor: sorted once every chunk is done
                sort_rows(big, lo, static_cast<size_t>(cur[v] - lo));
            };
            int32_t id = ck.sid;
            int64_t prev_len = ck.need;
            for (size_t i = ck.b; i < ck.e; ++i) {
                const int64_t len = voff[i + 1] - voff[i] + tl;
                const int64_t l = lcps[i];
                for (int64_t dd = prev_len; dd > l; --dd) finish(dd);
                for (int64_t d = l; d < len; ++d) {
                    const int32_t m = id++;
                    path[static_cast<size_t>(d + 1)] = m;
                    pstart[static_cast<size_t>(d + 1)] = cur[m];
                    if (m + 8 < n) __builtin_prefetch(outs + state_of.lo(static_cast<size_t>(m) + 8));
                    int32_t j, hi;
                    state_of.get(static_cast<size_t>(m), &j, &hi);
                    if (j >= hi) continue;
                    // outputs come longest first: the farthest ancestor decides whether any is
                    // FAR or shared
                    const int32_t far_nd = path[static_cast<size_t>(d + 1 - outs[j].len)];
                    if (!wk && m - far_nd < FAR && far_nd >= own) {
                        for (; j < hi; ++j) {
                            const int32_t nd = path[static_cast<size_t>(d + 1 - outs[j].len)];
                            const int32_t at = cur[nd]++;
                            tk[at] = outs[j].token;
                            ch[at] = static_cast<uint16_t>(m - nd);
                        }
                    } else {
                        for (; j < hi; ++j) emit(path[static_cast<size_t>(d + 1 - outs[j].len)], outs[j].token, m);
                    }
                }
                if (allow_end)
                    for (int32_t e : eos) emit(ends[i], e, end_state);
                prev_len = len;
            }
            // the path the next chunk starts on is left to it (and sorted after the chunks)
            const int64_t keep = c + 1 < n_chunks ? chunks[static_cast<size_t>(c) + 1].need : -1;
            for (int64_t dd = prev_len; dd > keep; --dd) finish(dd);
        };
        if (!run_chunks(n_chunks, emit_chunk)) {
            return CompileStatus::kNoMemory;
        }
        // the chunks' pairs into shared ancestors, then those rows sorted (row v ends where row
        // v + 1 starts, every row being complete now)
        std::vector<int32_t> shared;
        std::unique_ptr<IdBits> big;
        for (Chunk& ck : chunks) {
            for (const NodePair& p : ck.pend) put(p.node, p.token, p.child, fars);
            if (&ck != &chunks[0]) shared.insert(shared.end(), ck.path0.begin(), ck.path0.end());
            fars.insert(fars.end(), ck.fars.begin(), ck.fars.end());
            std::vector<NodePair>().swap(ck.pend);
            std::vector<NodePair>().swap(ck.fars);
        }
        std::sort(shared.begin(), shared.end());
        shared.erase(std::unique(shared.begin(), shared.end()), shared.end());
        for (int32_t v : shared) {
            if (wk && wk[v]) continue;
            const int32_t lo = v ? cur[v - 1] : 0;
            sort_rows(big, lo, static_cast<size_t>(cur[v] - lo));
        }
        for (int32_t e : eos) put(n, e, end_state, fars);
        for (int32_t e : eos) put(n + 1, e, end_state, fars);
        std::memmove(row_ptr.p + 1, row_ptr.p, (static_cast<size_t>(n) + 2) * sizeof(int32_t));
        row_ptr[0] = 0;
        LAP("emit");
    } else {
        Pair* out = pairs.p;
        second_pass([&](int32_t nd, int32_t t, int32_t m) { out[cur[nd]++] = {t, m}; });
        for (int32_t v = 0; v < n; ++v)
            sort_row(out + row_ptr[static_cast<size_t>(v)],
                     static_cast<size_t>(row_ptr[static_cast<size_t>(v) + 1] - row_ptr[static_cast<size_t>(v)]));
    }
    state_of.release();
    LAP("pairs");
    // -- values some token sequence cannot spell: prune, report ------------------------------------
    std::vector<int64_t>& bad = o.bad;
    if (prune) {
        std::vector<uint8_t> reach(static_cast<size_t>(n), 0), live(static_cast<size_t>(n), 0);
        reach[0] = 1;
        for (int32_t v = 0; v < n; ++v) {
            if (!reach[static_cast<size_t>(v)]) continue;
            for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j)
                if (pairs[static_cast<size_t>(j)].child < n) reach[static_cast<size_t>(pairs[static_cast<size_t>(j)].child)] = 1;
        }
        for (size_t i = 0; i < nv; ++i) live[static_cast<size_t>(ends[i])] = 1;
        for (int32_t v = n - 1; v >= 0; --v) {
            if (live[static_cast<size_t>(v)]) continue;
            for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j) {
                int32_t c = pairs[static_cast<size_t>(j)].child;
                if (c < n && live[static_cast<size_t>(c)]) {
                    live[static_cast<size_t>(v)] = 1;
                    break;
                }
            }
        }
        for (size_t i = 0; i < nv; ++i)
            if (!reach[static_cast<size_t>(ends[i])]) bad.push_back(static_cast<int64_t>(i));
        if (bad.empty()) {
            size_t w = 0;
            for (int32_t v = 0; v < n + 2; ++v) {
                int32_t lo = row_ptr[static_cast<size_t>(v)], hi = row_ptr[static_cast<size_t>(v) + 1];
                row_ptr[static_cast<size_t>(v)] = static_cast<int32_t>(w);
                for (int32_t j = lo; j < hi; ++j) {
                    Pair q = pairs[static_cast<size_t>(j)];
                    bool keep = q.child >= n ||
                                (v < n && reach[static_cast<size_t>(v)] && live[static_cast<size_t>(q.child)]);
                    if (keep) pairs[w++] = q;
                }
            }
            row_ptr[static_cast<size_t>(n) + 2] = static_cast<int32_t>(w);
            pairs.n = w;
            ok = tokens.resize(w) && children.resize(w);
            for (int32_t v = 0; v < n + 2 && ok; ++v) {
                for (int32_t j = row_ptr[static_cast<size_t>(v)]; j < row_ptr[static_cast<size_t>(v) + 1]; ++j) {
                    Pair q = pairs[static_cast<size_t>(j)];
                    tokens[static_cast<size_t>(j)] = q.token;
                    if (q.child == end_state) {
                        children[static_cast<size_t>(j)] = TO_END;
                    } else if (q.child - v < FAR) {
                        children[static_cast<size_t>(j)] = static_cast<uint16_t>(q.child - v);
                    } else {
                        children[static_cast<size_t>(j)] = FAR;
                        fars.push_back({v, q.token, q.child});
                    }
                }
            }
        }
        Buf<Pair> drop;
        std::swap(drop.p, pairs.p);
        pairs.n = pairs.cap = 0;
    }
    if (!bad.empty()) return CompileStatus::kUnreachable;
    // far children, in the order their pairs have in the rows
    std::sort(fars.begin(), fars.end(), [](const NodePair& a, const NodePair& b) {
        return a.node < b.node || (a.node == b.node && a.token < b.token);
    });
    for (const NodePair& f : fars) {
        const int32_t* lo = tokens.p + row_ptr[static_cast<size_t>(f.node)];
        const int32_t* hi = tokens.p + row_ptr[static_cast<size_t>(f.node) + 1];
        ok = ok && far_pos.push(static_cast<int32_t>(std::lower_bound(lo, hi, f.token) - tokens.p)) &&
             far_child.push(f.child);
    }
    (void)dead_state;
    LAP("codes");
    // the compact layout: row_ptr over the stored states alone, which states are walked, the keys
    Buf<uint64_t>& dbits = o.dbits;
    Buf<int32_t>&drank = o.drank, &kfirst = o.kfirst;
    Buf<int64_t>& info = o.info;
    dbits.pages_from = drank.pages_from = kfirst.pages_from = PAGES_FROM;
    if (ok && wk) {
        const int64_t n_states = int64_t{n} + 2, words = (n_states + 63) / 64;
        ok = dbits.assign(static_cast<size_t>(words), 0) && drank.resize(static_cast<size_t>(words)) &&
             kfirst.resize(nv) && info.resize(4);
        int64_t r = 0, dropped = 0;
        for (int64_t s = 0; ok && s < n_states; ++s) {
            if ((s & 63) == 0) drank[static_cast<size_t>(s >> 6)] = static_cast<int32_t>(dropped);
            if (wk[s]) {
                dbits[static_cast<size_t>(s >> 6)] |= uint64_t(1) << (s & 63);
                ++dropped;
            } else {
                row_ptr[static_cast<size_t>(r++)] = row_ptr[static_cast<size_t>(s)];
            }
        }
        if (ok) {
            row_ptr[static_cast<size_t>(r)] = row_ptr[static_cast<size_t>(n_states)];
            // into an array of its own size: the one it was counted in spans every node
            Buf<int32_t> small;
            small.pages_from = PAGES_FROM;
            ok = small.resize(static_cast<size_t>(r) + 1);
            if (ok) {
                std::memcpy(small.p, row_ptr.p, (static_cast<size_t>(r) + 1) * 4);
                std::swap(small.p, row_ptr.p);
                std::swap(small.n, row_ptr.n);
                std::swap(small.cap, row_ptr.cap);
                std::swap(small.mapped, row_ptr.mapped);
            }
            int64_t nf = 1;
            for (size_t i = 0; i < nv; ++i) {
                kfirst[i] = static_cast<int32_t>(nf);
                nf += voff[i + 1] - voff[i] + tl - lcps[i];
            }
            info[0] = n;
            info[1] = max_keys;
            info[2] = 0;
            info[3] = allow_end;
        }
        walked.release();
    }
    {
        Buf<Pair> drop;
        std::swap(drop.p, pairs.p);
        pairs.n = pairs.cap = 0;
    }
    return ok ? CompileStatus::kOk : CompileStatus::kNoMemory;
#undef LAP
}

}  // namespace trierouter
