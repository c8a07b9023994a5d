// Tool automata (see automata.h).
#include "automata.h"

namespace trierouter {

bool build_class_trie(ClassTrie& ct, const TT& tt, const int32_t* root_child, const int32_t* tab,
                      int64_t ns, int64_t nc, const int32_t* cls, int64_t max_cells,
                      const int64_t* from, int64_t n_from) {
    std::vector<uint8_t> live_class(static_cast<size_t>(nc), 0);
    for (int64_t k = 0; k < ns * nc; ++k)
        if (tab[k] >= 0) live_class[static_cast<size_t>(k % nc)] = 1;
    int16_t byte_class[256];  // the byte's class, -1: no edge anywhere
    for (int b = 0; b < 256; ++b) byte_class[b] = live_class[static_cast<size_t>(cls[b])] ? static_cast<int16_t>(cls[b]) : -1;
    ct.child.assign(static_cast<size_t>(nc), -1);
    ct.depth.assign(1, 0);
    // per class node, the states its class string leads to from ``from`` (bitsets of sw words)
    const bool prune = ns <= kPruneMaxStates && nc <= 32;
    const size_t sw = prune ? static_cast<size_t>((ns + 63) / 64) : 0;
    std::vector<uint64_t> sets(sw, 0);
    // per state, its classes with an edge; per class node, those of its states (the classes
    // its children can take)
    std::vector<uint32_t> qmask(prune ? static_cast<size_t>(ns) : 0, 0), cmask;
    uint32_t all_live = 0;
    for (int64_t k = 0; k < nc; ++k)
        if (live_class[static_cast<size_t>(k)]) all_live |= uint32_t{1} << (k & 31);
    for (int64_t q = 0; q < ns && prune; ++q)
        for (int64_t k = 0; k < nc; ++k)
            if (tab[q * nc + k] >= 0) qmask[static_cast<size_t>(q)] |= uint32_t{1} << k;
    cmask.push_back(prune ? 0 : all_live);
    for (int64_t i = 0; i < n_from && prune; ++i) {
        sets[static_cast<size_t>(from[i]) >> 6] |= uint64_t{1} << (from[i] & 63);
        cmask[0] |= qmask[static_cast<size_t>(from[i])];
    }
    uint64_t class_bits[32][4] = {};  // each class's bytes (256-bit sets)
    for (int b = 0; b < 256 && prune; ++b)
        if (byte_class[b] >= 0) class_bits[byte_class[b]][b >> 6] |= uint64_t{1} << (b & 63);
    uint8_t look[256];  // the bytes a node's children can take, ascending
    std::vector<int32_t> parent(1, -1);
    std::vector<std::pair<int32_t, int32_t>> toks;  // (class node, token)
    std::vector<std::pair<int32_t, int32_t>> stack{{0, 0}};  // (trie node, class node)
    int64_t visits = 0;
    constexpr int32_t kNone = -2;  // (node, class): no state walks it
    while (!stack.empty()) {
        auto [u, cu] = stack.back();
        stack.pop_back();
        auto enter = [&](int32_t c, uint8_t b) {
            const int16_t k = byte_class[b];
            if (k < 0) return;
            const size_t cell = static_cast<size_t>(cu) * static_cast<size_t>(nc) + static_cast<size_t>(k);
            int32_t v = ct.child[cell];
            if (v == kNone) return;
            if (v < 0) {
                if (prune) {  // the states after class k: none, and the node is not made
                    const size_t base = sets.size();
                    sets.resize(base + sw, 0);
                    const uint64_t* at = sets.data() + static_cast<size_t>(cu) * sw;
                    uint64_t* to = sets.data() + base;
                    uint32_t m = 0;
                    bool any = false;
                    for (size_t w = 0; w < sw; ++w)
                        for (uint64_t x = at[w]; x; x &= x - 1) {
                            const int64_t q = static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x)));
                            const int32_t q2 = tab[q * nc + k];
                            if (q2 >= 0) {
                                to[static_cast<size_t>(q2) >> 6] |= uint64_t{1} << (q2 & 63);
                                m |= qmask[static_cast<size_t>(q2)];
                                any = true;
                            }
                        }
                    if (!any) {
                        sets.resize(base);
                        ct.child[cell] = kNone;
                        return;
                    }
                    cmask.push_back(m);
                } else {
                    cmask.push_back(all_live);
                }
                v = static_cast<int32_t>(ct.depth.size());
                ct.child[cell] = v;
                ct.child.resize(ct.child.size() + static_cast<size_t>(nc), -1);
                ct.depth.push_back(static_cast<uint16_t>(ct.depth[static_cast<size_t>(cu)] + 1));
                parent.push_back(cu);
            }
            for (int32_t k2 = tt.tptr[c]; k2 < tt.tptr[c + 1]; ++k2) toks.emplace_back(v, tt.tids[k2]);
            if (tt.si[c].chi > tt.si[c].clo) stack.emplace_back(c, v);
            ++visits;
        };
        const uint32_t m = cmask[static_cast<size_t>(cu)];
        const int32_t lo = u == 0 ? 0 : tt.si[u].clo, hi = u == 0 ? 0 : tt.si[u].chi;
        int32_t nl = 0;  // the bytes of m's classes, when few against the node's children
        if (prune && (u == 0 || hi - lo > 8)) {
            uint64_t set[4] = {0, 0, 0, 0};
            for (uint32_t x = m; x; x &= x - 1)
                for (int w = 0; w < 4; ++w) set[w] |= class_bits[__builtin_ctz(x)][w];
            for (int w = 0; w < 4; ++w)
                for (uint64_t x = set[w]; x; x &= x - 1) look[nl++] = static_cast<uint8_t>(w * 64 + __builtin_ctzll(x));
        }
        if (u == 0) {
            if (prune) {
                for (int32_t j = 0; j < nl; ++j)
                    if (root_child[look[j]] >= 0) enter(root_child[look[j]], look[j]);
            } else {
                for (int b = 0; b < 256; ++b)
                    if (root_child[b] >= 0) enter(root_child[b], static_cast<uint8_t>(b));
            }
        } else if (prune && hi - lo > 8 && 4 * nl < hi - lo) {  // look the few bytes up
            int32_t at = lo;
            for (int32_t j = 0; j < nl && at < hi; ++j) {
                at = static_cast<int32_t>(std::lower_bound(tt.clab + at, tt.clab + hi, look[j]) - tt.clab);
                if (at < hi && tt.clab[at] == look[j]) enter(tt.cnode[at], look[j]);
            }
        } else {
            for (int32_t j = lo; j < hi; ++j) {
                const int16_t k = byte_class[tt.clab[j]];
                if (k >= 0 && ((m >> k) & 1)) enter(tt.cnode[j], tt.clab[j]);
            }
        }
        if (static_cast<int64_t>(ct.child.size()) > max_cells ||
            (visits >= 65536 && 4 * static_cast<int64_t>(ct.depth.size()) > visits) ||
            ct.depth.back() >= 65535)
            return false;
    }
    const size_t n = ct.depth.size();
    ct.height.assign(n, 0);
    ct.tptr.assign(n + 1, 0);
    for (const auto& [v, t] : toks) {
        ct.tptr[static_cast<size_t>(v) + 1]++;
        ct.height[static_cast<size_t>(v)] = ct.depth[static_cast<size_t>(v)];
    }
    for (size_t v = n; v-- > 1;) {  // children after their parent: heights bottom-up
        uint16_t& h = ct.height[static_cast<size_t>(parent[v])];
        h = std::max(h, ct.height[v]);
    }
    for (size_t v = 0; v < n; ++v) ct.tptr[v + 1] += ct.tptr[v];
    ct.tids.resize(toks.size());
    std::vector<int32_t> at(ct.tptr.begin(), ct.tptr.end() - 1);
    for (const auto& [v, t] : toks) ct.tids[static_cast<size_t>(at[static_cast<size_t>(v)]++)] = t;
    return true;
}

// The wiring of an opened call into (os, ob, od) (no Python call). False with w.err set.
bool wire_run(Wire& w, Buf<int32_t>& os, Buf<int32_t>& ob, Buf<int32_t>& od) {
    const int64_t n = w.n;
    const std::vector<Span<int32_t>>&fs = w.fs, &fb = w.fb, &fd = w.fd;
    const Span<int64_t> &offs = w.offs, &lstate = w.lstate, &lfrom = w.lfrom, &extra = w.extra;
    const size_t nf = fs.size();
    auto bad = [&](const char* what) { return w.err.range(what); };
    try {
        // which fragments are runs: edges in range, keys strictly increasing, above the last run
        std::vector<uint8_t> run(nf, 0);
        int64_t total = 0, last_key = -1;
        for (size_t k = 0; k < nf; ++k) {
            const int64_t off = offs.p[k], m = fs[k].n;
            bool sorted = true;
            int64_t prev = last_key;
            for (int64_t e = 0; e < m; ++e) {
                const int64_t s = fs[k].p[e] + off, b = fb[k].p[e], d = fd[k].p[e] + off;
                if (s < 0 || s >= n || d < 0 || d >= n || b < 0 || b > 255) return bad("a fragment edge");
                const int64_t key = s * 256 + b;
                if (key <= prev) sorted = false;
                prev = key;
            }
            total += m;
            if (sorted) {
                run[k] = 1;
                if (m) last_key = prev;
            }
        }
        // the other edges, as (src, byte, dst)
        std::vector<int32_t> es, eb, ed;
        std::vector<std::vector<int32_t>> by_src(nf), first(nf);
        auto put = [&](int64_t s, int64_t b, int64_t d) {
            es.push_back(static_cast<int32_t>(s));
            eb.push_back(static_cast<int32_t>(b));
            ed.push_back(static_cast<int32_t>(d));
        };
        for (size_t k = 0; k < nf; ++k)
            if (!run[k])
                for (int64_t e = 0; e < fs[k].n; ++e) put(fs[k].p[e] + offs.p[k], fb[k].p[e], fd[k].p[e] + offs.p[k]);
        for (int64_t j = 0; j < lstate.n; ++j) {
            const int64_t s = lstate.p[j], f = lfrom.p[j] >> 32, local = lfrom.p[j] & 0xFFFFFFFF;
            if (s < 0 || s >= n || f < 0 || f >= static_cast<int64_t>(nf)) return bad("a link");
            const size_t k = static_cast<size_t>(f);
            const int64_t off = offs.p[k], m = fs[k].n;
            const int32_t* src = fs[k].p;
            if (run[k]) {  // sorted by source: the local state's edges are one range
                const int32_t* lo = std::lower_bound(src, src + m, static_cast<int32_t>(local));
                for (const int32_t* it = lo; it < src + m && *it == local; ++it) {
                    const int64_t e = it - src;
                    put(s, fb[k].p[e], fd[k].p[e] + off);
                }
                continue;
            }
            if (first[k].empty()) {  // local state -> its edges, in edge order
                int64_t top = 0;
                for (int64_t e = 0; e < m; ++e) top = std::max<int64_t>(top, src[e] + 1);
                first[k].assign(static_cast<size_t>(top) + 1, 0);
                for (int64_t e = 0; e < m; ++e) first[k][static_cast<size_t>(src[e]) + 1]++;
                for (size_t x = 1; x < first[k].size(); ++x) first[k][x] += first[k][x - 1];
                by_src[k].resize(static_cast<size_t>(m));
                std::vector<int32_t> at(first[k].begin(), first[k].end() - 1);
                for (int64_t e = 0; e < m; ++e)
                    by_src[k][static_cast<size_t>(at[static_cast<size_t>(src[e])]++)] = static_cast<int32_t>(e);
            }
            if (local < 0 || local + 1 >= static_cast<int64_t>(first[k].size())) continue;  // no edges
            for (int32_t x = first[k][static_cast<size_t>(local)]; x < first[k][static_cast<size_t>(local) + 1]; ++x) {
                const int32_t e = by_src[k][static_cast<size_t>(x)];
                put(s, fb[k].p[e], fd[k].p[e] + off);
            }
        }
        for (int64_t j = 0; j < extra.n; j += 3) {
            const int64_t s = extra.p[j], b = extra.p[j + 1], d = extra.p[j + 2];
            if (s < 0 || s >= n || d < 0 || d >= n || b < 0 || b > 255) return bad("an edge");
            put(s, b, d);
        }
        // the other edges grouped by source (counting sort)
        const size_t m = es.size();
        std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0);
        std::vector<int32_t> order(m);
        const size_t cap = m + static_cast<size_t>(total);
        if (!os.reserve(cap) || !ob.reserve(cap) || !od.reserve(cap)) return w.err.no_memory();
        for (size_t e = 0; e < m; ++e) start[static_cast<size_t>(es[e]) + 1]++;
        for (size_t s = 0; s < static_cast<size_t>(n); ++s) start[s + 1] += start[s];
        {
            std::vector<int64_t> at(start.begin(), start.end() - 1);
            for (size_t e = 0; e < m; ++e) order[static_cast<size_t>(at[static_cast<size_t>(es[e])]++)] = static_cast<int32_t>(e);
        }
        auto emit = [&](int64_t s, int32_t b, int32_t d) {
            os.p[os.n++] = static_cast<int32_t>(s);
            ob.p[ob.n++] = b;
            od.p[od.n++] = d;
        };
        // the runs' edges in (src, byte) order: a cursor over the run fragments
        size_t rk = 0;
        int64_t re = 0;
        auto run_src = [&]() -> int64_t {  // source of the run cursor's edge, n when none is left
            while (rk < nf && (!run[rk] || re >= fs[rk].n)) {
                ++rk;
                re = 0;
            }
            return rk < nf ? fs[rk].p[re] + offs.p[rk] : n;
        };
        int32_t slot[256];
        std::fill(slot, slot + 256, -1);
        int64_t bad_src = -1, bad_byte = 256;
        int64_t rs = run_src();
        for (int64_t s = 0; s < n && bad_src < 0; ++s) {
            const int64_t g0 = start[static_cast<size_t>(s)], g1 = start[static_cast<size_t>(s) + 1];
            if (rs > s && g0 == g1) {  // nothing leaves s: skip to the next source with edges
                continue;
            }
            if (g0 == g1) {  // only run edges (keys strictly increasing): copied as they are
                while (rs == s) {
                    const int64_t off = offs.p[rk];
                    const int32_t* src = fs[rk].p;
                    while (re < fs[rk].n && src[re] + off == s) {
                        emit(s, fb[rk].p[re], fd[rk].p[re] + static_cast<int32_t>(off));
                        ++re;
                    }
                    rs = run_src();
                }
                continue;
            }
            uint64_t seen[4] = {0, 0, 0, 0};
            auto add = [&](int32_t b, int32_t d) {
                if (slot[b] < 0) {
                    slot[b] = d;
                    seen[b >> 6] |= uint64_t{1} << (b & 63);
                } else if (slot[b] != d && b < bad_byte) {
                    bad_src = s;
                    bad_byte = b;
                }
            };
            while (rs == s) {
                const int64_t off = offs.p[rk];
                const int32_t* src = fs[rk].p;
                while (re < fs[rk].n && src[re] + off == s) {
                    add(fb[rk].p[re], fd[rk].p[re] + static_cast<int32_t>(off));
                    ++re;
                }
                rs = run_src();
            }
            for (int64_t x = g0; x < g1; ++x) {
                const int32_t e = order[static_cast<size_t>(x)];
                add(eb[static_cast<size_t>(e)], ed[static_cast<size_t>(e)]);
            }
            for (int q = 0; q < 4; ++q)
                for (uint64_t bits = seen[q]; bits; bits &= bits - 1) {
                    const int b = q * 64 + __builtin_ctzll(bits);
                    emit(s, b, slot[b]);
                    slot[b] = -1;
                }
        }
        if (bad_src >= 0) {
            w.err.kind = RunError::kAmbiguous;
            w.err.src = bad_src;
            w.err.byte = bad_byte;
            return false;
        }
    } catch (const std::bad_alloc&) {
        return w.err.no_memory();
    }
    return true;
}

// The byte classes of an automaton given as m edges (src --byte--> dst, in range, at most one
// per (src, byte); a repeated edge must be identical) and its dense table over them (n rows of
// nk columns, -1: no edge) into ``table``: bytes whose edges are the same at every state share
// a class, numbered in order of their smallest byte. No Python call; throws std::bad_alloc.
bool compress_run(const int32_t* src, const int32_t* byte, const int32_t* dst, int64_t m, int64_t n,
                  Buf<int32_t>& table, int32_t* cls, int64_t& nk) {
    // edges grouped by byte, each group in src order: a byte's group is its signature
    std::vector<int32_t> rep;
    std::vector<int64_t> start(257, 0);
    std::vector<std::pair<int32_t, int32_t>> ed(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) start[static_cast<size_t>(byte[i]) + 1]++;
    for (int b = 0; b < 256; ++b) start[static_cast<size_t>(b) + 1] += start[static_cast<size_t>(b)];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    bool by_src = true;  // edges in src order (a stable grouping keeps each group sorted)
    for (int64_t i = 0; i < m; ++i) {
        ed[static_cast<size_t>(fill[static_cast<size_t>(byte[i])]++)] = {src[i], dst[i]};
        if (i && src[i] < src[i - 1]) by_src = false;
    }
    std::vector<uint64_t> h(256);
    for (int b = 0; b < 256; ++b) {
        auto lo = ed.begin() + start[static_cast<size_t>(b)], hi = ed.begin() + start[static_cast<size_t>(b) + 1];
        if (!by_src) std::sort(lo, hi);
        uint64_t x = 1469598103934665603ull ^ static_cast<uint64_t>(hi - lo);
        for (auto it = lo; it != hi; ++it)
            x = (x ^ (static_cast<uint64_t>(static_cast<uint32_t>(it->first)) << 32 |
                      static_cast<uint32_t>(it->second))) * 1099511628211ull;
        h[static_cast<size_t>(b)] = x;
    }
    for (int b = 0; b < 256; ++b) {
        const int64_t lb = start[static_cast<size_t>(b)], nb = start[static_cast<size_t>(b) + 1] - lb;
        int32_t k = -1;
        for (size_t r = 0; r < rep.size() && k < 0; ++r) {
            const int32_t a = rep[r];
            const int64_t la = start[static_cast<size_t>(a)], na = start[static_cast<size_t>(a) + 1] - la;
            if (h[static_cast<size_t>(a)] == h[static_cast<size_t>(b)] && na == nb &&
                std::equal(ed.begin() + la, ed.begin() + la + na, ed.begin() + lb))
                k = static_cast<int32_t>(r);
        }
        if (k < 0) {
            k = static_cast<int32_t>(rep.size());
            rep.push_back(b);
        }
        cls[b] = k;
    }
    nk = static_cast<int64_t>(rep.size());
    if (!table.resize(static_cast<size_t>(n * nk))) return false;
    int32_t* t = table.p;
    std::fill(t, t + n * nk, -1);
    for (int64_t k = 0; k < nk; ++k) {
        const int32_t b = rep[static_cast<size_t>(k)];
        for (int64_t e = start[static_cast<size_t>(b)]; e < start[static_cast<size_t>(b) + 1]; ++e)
            t[static_cast<int64_t>(ed[static_cast<size_t>(e)].first) * nk + k] = ed[static_cast<size_t>(e)].second;
    }
    return true;
}

// The walks of an opened job (no Python call: run with the GIL released). False: no memory.
bool masks_walk(MasksJob& j) {
    const Span<int32_t>& tab = j.tab;
    const Span<int32_t>& cls = j.cls;
    const Span<int64_t>& st = j.st;
    const uint8_t* alt = j.alt;
    TokenTrie* tri = j.tri;
    TokenTrie* alt_tri = j.alt_tri;
    const int64_t words = j.words;
    const int share_rows = j.share_rows;
    uint32_t* rows = j.rows;
    const TrieShape* shape = j.shape;
    Buf<int64_t>& ptr = j.ptr;
    Buf<int32_t>& ids = j.ids;
    Buf<int32_t>& out = j.out;
    bool& reordered = j.reordered;
    const int64_t ns = j.ns, nc = j.nc;
    const TT tt_main(tri);
    const TT tt_alt(alt_tri ? alt_tri : tri);
    bool ok = true;
    try {
        // per automaton state, on first visit: its live bytes (ascending); at a trie node with
        // more children than the state has live bytes, the live bytes are looked up among the
        // children (sorted labels: binary search), else the children are scanned
        std::vector<int32_t> live_at(static_cast<size_t>(ns), -1), live_n(static_cast<size_t>(ns), 0);
        std::vector<uint8_t> live;
        // (branch fmt) each class's bytes as a 256-bit set: a state's live bytes are the union
        // of its live classes' sets, read out in ascending order
        std::vector<uint64_t> class_bits(static_cast<size_t>(nc) * 4, 0);
        for (int b = 0; b < 256; ++b)
            class_bits[static_cast<size_t>(cls.p[b]) * 4 + static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
        auto live_of = [&](int32_t q) {
            if (live_at[static_cast<size_t>(q)] < 0) {
                live_at[static_cast<size_t>(q)] = static_cast<int32_t>(live.size());
                const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                uint64_t set[4] = {0, 0, 0, 0};
                for (int64_t c = 0; c < nc; ++c)
                    if (qrow[c] >= 0)
                        for (int w = 0; w < 4; ++w) set[w] |= class_bits[static_cast<size_t>(c) * 4 + static_cast<size_t>(w)];
                for (int w = 0; w < 4; ++w)
                    for (uint64_t x = set[w]; x; x &= x - 1)
                        live.push_back(static_cast<uint8_t>(w * 64 + __builtin_ctzll(x)));
                live_n[static_cast<size_t>(q)] =
                    static_cast<int32_t>(live.size()) - live_at[static_cast<size_t>(q)];
            }
        };
        auto shared = [&](int64_t i) { return st.p[i] >= 0 && !(alt && alt[i]); };
        constexpr int64_t kClassTrieMaxClasses = 16;  // past it, classes merge few trie nodes
        constexpr int32_t kMinLevel = 6;  // below: the longer tokens are nearly all of them
        // the levels: blk[L][q] = q's block at level L (L = 0..lcap)
        std::vector<std::vector<int32_t>> blk;
        std::vector<int32_t> nblk;
        bool same_all = false;  // states in one block at lcap have equal rows
        int64_t wide = 0;  // states walking ``tri`` with >= 16 live bytes
        if (shape || (share_rows && nc <= kClassTrieMaxClasses))
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) {
                    live_of(static_cast<int32_t>(st.p[i]));
                    wide += live_n[static_cast<size_t>(st.p[i])] >= 16;
                }
        // the class trie, when kClassTrieMinWide wide states walk over few classes (a counter or
        // a format: their walks share most trie nodes, the class trie merges them); share=False:
        // none. Building it costs about two walks of the union of the states' walks, so two or
        // three wide states gain nothing: ^[A-Z]{3}-[0-9]{2,4}$ (3 wide states) took 49 us
        // with it, 31 without; uuid (36) 68 vs 138; a 1,000-tool registry's masks the same
        ClassTrie ct;
        std::vector<int64_t> from;  // the states that walk the class trie
        constexpr int64_t kClassTrieMinWide = 4;
        if (share_rows && nc <= kClassTrieMaxClasses && wide >= kClassTrieMinWide)
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) from.push_back(st.p[i]);
        const bool on_ct = share_rows && nc <= kClassTrieMaxClasses && wide >= kClassTrieMinWide &&
                           build_class_trie(ct, tt_main, tri->root_child, tab.p, ns, nc, cls.p, int64_t{1} << 22,
                                            from.data(), static_cast<int64_t>(from.size()));
        if (shape) {
            // the levels' cost (entries of the key rows, all levels) is kept below a fraction
            // of what the wide states' walks cost at least
            const int64_t budget = std::min<int64_t>(wide * 8192, int64_t{1} << 22);
            if (wide >= 2 && ns * nc * kMinLevel <= budget) {
                blk.emplace_back(static_cast<size_t>(ns), 0);
                nblk.push_back(1);
                std::vector<int32_t> key(static_cast<size_t>(ns * nc)), idx(static_cast<size_t>(ns));
                std::vector<uint64_t> hash(static_cast<size_t>(ns));
                std::vector<int32_t> cnt;
                int64_t work = 0;
                bool stable = false;
                while (static_cast<int32_t>(blk.size()) - 1 < shape->max_len) {
                    const std::vector<int32_t>& prev = blk.back();
                    for (int64_t k = 0; k < ns * nc; ++k)
                        key[static_cast<size_t>(k)] = tab.p[k] < 0 ? -1 : prev[static_cast<size_t>(tab.p[k])];
                    const int32_t* kp = key.data();
                    for (int64_t q = 0; q < ns; ++q) {  // a hash of the row: most ties end there
                        idx[static_cast<size_t>(q)] = static_cast<int32_t>(q);
                        uint64_t h = 0x9E3779B97F4A7C15ull;
                        for (int64_t c = 0; c < nc; ++c)
                            h = (h ^ static_cast<uint32_t>(kp[q * nc + c])) * 0xBF58476D1CE4E5B9ull;
                        hash[static_cast<size_t>(q)] = h ^ (h >> 31);
                    }
                    auto less = [&](int32_t x, int32_t y) {
                        const uint64_t hx = hash[static_cast<size_t>(x)], hy = hash[static_cast<size_t>(y)];
                        if (hx != hy) return hx < hy;
                        return std::lexicographical_compare(kp + x * nc, kp + (x + 1) * nc, kp + y * nc,
                                                            kp + (y + 1) * nc);
                    };
                    std::sort(idx.begin(), idx.end(), less);
                    std::vector<int32_t> nb(static_cast<size_t>(ns));
                    int32_t nk = 0;
                    for (int64_t k = 0; k < ns; ++k) {
                        const int32_t x = idx[static_cast<size_t>(k)];
                        if (k > 0 && !std::equal(kp + x * nc, kp + (x + 1) * nc, kp + idx[static_cast<size_t>(k) - 1] * nc))
                            ++nk;
                        nb[static_cast<size_t>(x)] = nk;
                    }
                    work += ns * nc;
                    if (nk + 1 == nblk.back()) {  // equal to the previous level: stable from here
                        stable = true;
                        break;
                    }
                    // every walked state alone in its block: no row to share from here on
                    cnt.assign(static_cast<size_t>(nk) + 1, 0);
                    bool alone = true;
                    for (int64_t i = 0; i < st.n && alone; ++i)
                        if (shared(i)) alone = ++cnt[static_cast<size_t>(nb[static_cast<size_t>(st.p[i])])] < 2;
                    if (alone) break;
                    blk.push_back(std::move(nb));
                    nblk.push_back(nk + 1);
                    if (work + ns * nc > budget) break;  // deeper levels not affordable
                }
                same_all = stable || static_cast<int32_t>(blk.size()) - 1 >= shape->max_len;
                if (static_cast<int32_t>(blk.size()) - 1 < kMinLevel && !same_all) blk.clear();  // none
            }
        }
        const int32_t lcap = static_cast<int32_t>(blk.size()) - 1;  // -1: no sharing
        // processing order: the other states first, then the shared ones from the last to split
        // off from every other (a state alike to many first: the rest derive from it)
        std::vector<int64_t> ord;
        std::vector<std::vector<int32_t>> rep;  // per level and block: a state already walked
        if (lcap >= 0) {
            std::vector<int32_t> split(static_cast<size_t>(st.n), lcap + 1);
            std::vector<int32_t> cnt;
            for (int32_t L = lcap; L >= 0; --L) {
                cnt.assign(static_cast<size_t>(nblk[static_cast<size_t>(L)]), 0);
                const std::vector<int32_t>& bl = blk[static_cast<size_t>(L)];
                for (int64_t i = 0; i < st.n; ++i)
                    if (shared(i)) cnt[static_cast<size_t>(bl[static_cast<size_t>(st.p[i])])]++;
                for (int64_t i = 0; i < st.n; ++i)
                    if (shared(i) && cnt[static_cast<size_t>(bl[static_cast<size_t>(st.p[i])])] == 1)
                        split[static_cast<size_t>(i)] = L;
            }
            for (int64_t i = 0; i < st.n; ++i)
                if (!shared(i)) ord.push_back(i);
            const size_t first = ord.size();
            for (int64_t i = 0; i < st.n; ++i)
                if (shared(i)) ord.push_back(i);
            std::stable_sort(ord.begin() + static_cast<std::ptrdiff_t>(first), ord.end(), [&](int64_t x, int64_t y) {
                return split[static_cast<size_t>(x)] > split[static_cast<size_t>(y)];
            });
            for (int32_t L = 0; L <= lcap; ++L) rep.emplace_back(static_cast<size_t>(nblk[static_cast<size_t>(L)]), -1);
            reordered = true;
        }
        std::vector<int64_t> span0(reordered ? static_cast<size_t>(st.n) : 0),
            span1(reordered ? static_cast<size_t>(st.n) : 0);
        const uint16_t* sdepth = shape ? shape->depth.data() : nullptr;
        const uint16_t* sheight = shape ? shape->height.data() : nullptr;
        // a result of more than kSortMax tokens is sorted through a bitmap over the token ids
        // instead of std::sort: from ~64 ids up it costs less (uuid's masks: -30%, 10,000 real
        // tools' masks: -20%; it was 512). Two levels: bit w of ``summary`` marks a non-zero
        // word w of ``bits``, so the read-out visits the set words only (a uuid row's ~200 ids
        // lie in ~150 of the 2,400 words a 151K vocabulary spans: it scanned them all)
        std::vector<uint64_t> bits, summary;
        constexpr size_t kSortMax = 64;
        std::vector<std::pair<int32_t, int32_t>> stack;
        ptr[0] = 0;
        for (int64_t k_ = 0; k_ < st.n && ok; ++k_) {
            const int64_t i = reordered ? ord[static_cast<size_t>(k_)] : k_;
            const size_t row0 = ids.n;
            stack.clear();
            const bool use_alt = alt && alt[i];
            const TT& tt = use_alt ? tt_alt : tt_main;
            const int32_t* root_child = use_alt ? alt_tri->root_child : tri->root_child;
            int32_t par = -1, lev = 0;  // derive from row(par): same definedness to length lev
            if (lcap >= 0 && shared(i)) {
                const size_t q = static_cast<size_t>(st.p[i]);
                for (int32_t L = lcap; L >= kMinLevel && par < 0; --L) {
                    par = rep[static_cast<size_t>(L)][static_cast<size_t>(blk[static_cast<size_t>(L)][q])];
                    lev = L;
                }
                if (par < 0) lev = 0;
            }
            size_t mid = row0;  // [row0, mid): tokens kept from row(par), sorted
            bool walk = st.p[i] >= 0;
            if (par >= 0) {
                const size_t p0 = static_cast<size_t>(span0[static_cast<size_t>(par)]);
                const size_t pn = static_cast<size_t>(span1[static_cast<size_t>(par)]) - p0;
                // room for the rest at this row's size (no regrowth: each one faults and copies)
                ok = ids.reserve(ids.n + std::min<size_t>(pn * static_cast<size_t>(st.n - k_), size_t{1} << 26));
                ok = ok && ids.reserve(ids.n + pn);
                if (ok && lev == lcap && same_all) {
                    if (pn) std::memcpy(ids.p + ids.n, ids.p + p0, pn * sizeof(int32_t));
                    ids.n += pn;
                    walk = false;
                } else if (ok) {
                    const uint16_t* tl = shape->tok_len.data();
                    for (size_t k = p0; k < p0 + pn; ++k) {
                        const int32_t t = ids.p[k];
                        if (tl[t] <= lev) ids.p[ids.n++] = t;
                    }
                }
                mid = ids.n;
            }
            if (walk) stack.emplace_back(0, static_cast<int32_t>(st.p[i]));
            auto take = [&](int32_t c, int32_t q2) {
                if (lev > 0) {  // only the tokens longer than lev, below nodes that hold one
                    if (sheight[c] <= lev) return;
                    if (sdepth[c] > lev)
                        for (int32_t k = tt.tptr[c]; k < tt.tptr[c + 1]; ++k) ok = ok && ids.push(tt.tids[k]);
                } else {
                    for (int32_t k = tt.tptr[c]; k < tt.tptr[c + 1]; ++k) ok = ok && ids.push(tt.tids[k]);
                }
                if (tt.si[c].chi > tt.si[c].clo) stack.emplace_back(c, q2);
            };
            if (on_ct && !use_alt) {  // the same walk over the class trie (root 0)
                const int32_t* cchild = ct.child.data();
                const uint16_t *cdepth = ct.depth.data(), *cheight = ct.height.data();
                while (!stack.empty() && ok) {
                    auto [u, q] = stack.back();
                    stack.pop_back();
                    const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                    const int32_t* urow = cchild + static_cast<int64_t>(u) * nc;
                    for (int64_t k = 0; k < nc; ++k) {
                        const int32_t v = urow[k], q2 = qrow[k];
                        if (v < 0 || q2 < 0 || cheight[v] <= lev) continue;  // lev 0: no token below
                        if (cdepth[v] > lev)
                            for (int32_t j = ct.tptr[static_cast<size_t>(v)]; j < ct.tptr[static_cast<size_t>(v) + 1]; ++j)
                                ok = ok && ids.push(ct.tids[static_cast<size_t>(j)]);
                        if (cheight[v] > cdepth[v]) stack.emplace_back(v, q2);
                    }
                }
            }
            while (!stack.empty() && ok) {
                auto [u, q] = stack.back();
                stack.pop_back();
                const int32_t* qrow = tab.p + static_cast<int64_t>(q) * nc;
                const int32_t lo = tt.si[u].clo, hi = tt.si[u].chi;
                const int32_t nch = hi - lo;
                int32_t l0 = 0, l1 = 0;
                if (u == 0 || nch > 8) {
                    live_of(q);
                    l0 = live_at[static_cast<size_t>(q)];
                    l1 = l0 + live_n[static_cast<size_t>(q)];
                }
                if (u == 0) {
                    for (int32_t j = l0; j < l1; ++j) {
                        const uint8_t b = live[static_cast<size_t>(j)];
                        const int32_t c = root_child[b];
                        if (c >= 0) take(c, qrow[cls.p[b]]);
                    }
                } else if (nch > 8 && 4 * (l1 - l0) < nch) {
                    const uint8_t* lab = tt.clab;
                    int32_t from = lo;
                    for (int32_t j = l0; j < l1 && from < hi; ++j) {
                        const uint8_t b = live[static_cast<size_t>(j)];
                        from = static_cast<int32_t>(std::lower_bound(lab + from, lab + hi, b) - lab);
                        if (from < hi && lab[from] == b) take(tt.cnode[from], qrow[cls.p[b]]);
                    }
                } else {
                    for (int32_t j = lo; j < hi; ++j) {
                        const int32_t q2 = qrow[cls.p[tt.clab[j]]];
                        if (q2 >= 0) take(tt.cnode[j], q2);
                    }
                }
            }
            if (!ok) break;
            const size_t got = ids.n - mid;
            if (rows) {
                uint32_t* r = rows + static_cast<size_t>(i) * static_cast<size_t>(words);
                for (size_t k = row0; k < ids.n; ++k)
                    r[static_cast<size_t>(ids.p[k]) >> 5] |= uint32_t{1} << (ids.p[k] & 31);
                ids.n = row0;
            } else if (got > kSortMax) {
                int32_t top = 0;
                for (size_t k = mid; k < ids.n; ++k) top = std::max(top, ids.p[k]);
                if (bits.size() <= static_cast<size_t>(top) / 64) {
                    bits.resize(static_cast<size_t>(top) / 64 + 1, 0);
                    summary.resize(bits.size() / 64 + 1, 0);
                }
                for (size_t k = mid; k < ids.n; ++k) {
                    const size_t w = static_cast<size_t>(ids.p[k]) >> 6;
                    bits[w] |= uint64_t{1} << (ids.p[k] & 63);
                    summary[w >> 6] |= uint64_t{1} << (w & 63);
                }
                size_t at = mid;
                for (size_t sw = 0; sw <= static_cast<size_t>(top) / 4096; ++sw) {
                    for (uint64_t s = summary[sw]; s; s &= s - 1) {
                        const size_t w = sw * 64 + static_cast<size_t>(__builtin_ctzll(s));
                        for (uint64_t x = bits[w]; x; x &= x - 1)
                            ids.p[at++] = static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x)));
                        bits[w] = 0;
                    }
                    summary[sw] = 0;
                }
                ids.n = at;  // (a walk yields each token once: at == ids.n)
            } else {
                std::sort(ids.p + mid, ids.p + ids.n);
            }
            if (mid > row0 && ids.n > mid) std::inplace_merge(ids.p + row0, ids.p + mid, ids.p + ids.n);
            if (reordered) {
                span0[static_cast<size_t>(i)] = static_cast<int64_t>(row0);
                span1[static_cast<size_t>(i)] = static_cast<int64_t>(ids.n);
                if (shared(i)) {
                    const size_t q = static_cast<size_t>(st.p[i]);
                    for (int32_t L = 0; L <= lcap; ++L) {
                        int32_t& r = rep[static_cast<size_t>(L)][static_cast<size_t>(blk[static_cast<size_t>(L)][q])];
                        if (r < 0) r = static_cast<int32_t>(i);
                    }
                }
            } else {
                ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(ids.n);
            }
        }
        if (ok && reordered) {  // the rows in states' order
            ok = out.reserve(std::max<size_t>(ids.n, 1));
            for (int64_t i = 0; i < st.n && ok; ++i) {
                const size_t p0 = static_cast<size_t>(span0[static_cast<size_t>(i)]);
                const size_t pn = static_cast<size_t>(span1[static_cast<size_t>(i)]) - p0;
                if (pn) std::memcpy(out.p + out.n, ids.p + p0, pn * sizeof(int32_t));  // (ids.p: null if none)
                out.n += pn;
                ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(out.n);
            }
        }
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    return ok;
}


// A job's run (no Python call: run with the GIL released): with a wire, the automaton wired
// and compressed first; then the walks. False with j.err set.
bool masks_run(MasksJob& j) {
    if (j.wire) {
        Wire& w = *j.wire;
        Buf<int32_t> src, byte, dst;
        if (!wire_run(w, src, byte, dst)) {
            j.err = w.err;
            return false;
        }
        try {
            if (!j.own_cls.resize(256) || !compress_run(src.p, byte.p, dst.p, static_cast<int64_t>(src.n), w.n, j.wide,
                                                        j.own_cls.p, j.nc))
                return j.err.no_memory();
        } catch (const std::bad_alloc&) {
            return j.err.no_memory();
        }
        const size_t cells = j.wide.n;
        if (j.ns <= 128) {  // the narrowest signed type holding every state and -1
            if (!j.tab8.resize(cells)) return j.err.no_memory();
            for (size_t i = 0; i < cells; ++i) j.tab8.p[i] = static_cast<int8_t>(j.wide.p[i]);
        } else if (j.ns <= 32768) {
            if (!j.tab16.resize(cells)) return j.err.no_memory();
            for (size_t i = 0; i < cells; ++i) j.tab16.p[i] = static_cast<int16_t>(j.wide.p[i]);
        }
        j.tab.p = j.wide.p;
        j.cls.p = j.own_cls.p;
    }
    return masks_walk(j) || j.err.no_memory();
}

bool list_masks(const int32_t* tab, int64_t n_classes, const int32_t* cls, const int64_t* states,
                int64_t n, const int32_t* cands, int64_t m, const uint8_t* buf, const int64_t* off,
                Buf<int64_t>& ptr, Buf<int32_t>& ids) {
    if (!ptr.resize(static_cast<size_t>(n) + 1)) return false;
    ptr[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        const size_t row0 = ids.n;
        for (int64_t k = 0; k < m; ++k) {
            const int32_t t = cands[k];
            int32_t q = static_cast<int32_t>(states[i]);
            for (int64_t j = off[t]; j < off[t + 1] && q >= 0; ++j) q = tab[static_cast<int64_t>(q) * n_classes + cls[buf[j]]];
            if (q >= 0 && !ids.push(t)) return false;
        }
        std::sort(ids.p + row0, ids.p + ids.n);
        ptr[static_cast<size_t>(i) + 1] = static_cast<int64_t>(ids.n);
    }
    return true;
}

}  // namespace trierouter
