// Regex subset: parser, Thompson NFA, subset construction (see regex.h).
#include "regex.h"

namespace trierouter {

bool determinize(const NfaEdges& g, int64_t start, int64_t final, long long max_states, Dfa& out) {
    const int64_t n = g.n;
    const size_t W = static_cast<size_t>((n + 63) / 64);
    // adjacency: byte edges and epsilon edges per NFA state
    std::vector<int32_t> eptr(static_cast<size_t>(n) + 1, 0), xptr(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < g.ne; ++i) eptr[static_cast<size_t>(g.es[i]) + 1]++;
    for (int64_t i = 0; i < g.nx; ++i) xptr[static_cast<size_t>(g.xs[i]) + 1]++;
    for (int64_t v = 0; v < n; ++v) {
        eptr[static_cast<size_t>(v) + 1] += eptr[static_cast<size_t>(v)];
        xptr[static_cast<size_t>(v) + 1] += xptr[static_cast<size_t>(v)];
    }
    std::vector<int32_t> eidx(static_cast<size_t>(g.ne)), xto(static_cast<size_t>(g.nx));
    {
        std::vector<int32_t> f(eptr.begin(), eptr.end() - 1), h(xptr.begin(), xptr.end() - 1);
        for (int64_t i = 0; i < g.ne; ++i) eidx[static_cast<size_t>(f[static_cast<size_t>(g.es[i])]++)] = static_cast<int32_t>(i);
        for (int64_t i = 0; i < g.nx; ++i) xto[static_cast<size_t>(h[static_cast<size_t>(g.xs[i])]++)] = g.xd[i];
    }
    std::vector<int32_t> todo;
    auto close = [&](uint64_t* set) {  // epsilon closure, in place
        todo.clear();
        for (size_t w = 0; w < W; ++w)
            for (uint64_t x = set[w]; x; x &= x - 1)
                todo.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x))));
        while (!todo.empty()) {
            const int32_t v = todo.back();
            todo.pop_back();
            for (int32_t k = xptr[static_cast<size_t>(v)]; k < xptr[static_cast<size_t>(v) + 1]; ++k) {
                const int32_t t = xto[static_cast<size_t>(k)];
                uint64_t& word = set[static_cast<size_t>(t) >> 6];
                const uint64_t bit = uint64_t{1} << (t & 63);
                if (!(word & bit)) {
                    word |= bit;
                    todo.push_back(t);
                }
            }
        }
    };
    // the DFA states' sets, W words each, found by a hash of their words
    std::vector<uint64_t> sets;
    std::unordered_multimap<uint64_t, int32_t> ids;
    auto id_of = [&](const uint64_t* set) {
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (size_t w = 0; w < W; ++w) h = (h ^ set[w]) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        for (auto [it, last] = ids.equal_range(h); it != last; ++it)
            if (std::memcmp(sets.data() + static_cast<size_t>(it->second) * W, set, W * 8) == 0) return it->second;
        const int32_t id = static_cast<int32_t>(out.accept.size());
        ids.emplace(h, id);
        sets.insert(sets.end(), set, set + W);
        out.accept.push_back(static_cast<uint8_t>(set[static_cast<size_t>(final) >> 6] >> (final & 63) & 1));
        return id;
    };
    std::vector<uint64_t> cur(W, 0), next(256 * W), set(W);
    cur[static_cast<size_t>(start) >> 6] |= uint64_t{1} << (start & 63);
    close(cur.data());
    id_of(cur.data());
    for (size_t i = 0; i < out.accept.size(); ++i) {
        std::memcpy(cur.data(), sets.data() + i * W, W * 8);
        uint64_t used[4] = {0, 0, 0, 0};  // the bytes with an edge (their rows of next cleared)
        for (size_t w = 0; w < W; ++w)
            for (uint64_t x = cur[w]; x; x &= x - 1) {
                const size_t v = w * 64 + static_cast<size_t>(__builtin_ctzll(x));
                for (int32_t k = eptr[v]; k < eptr[v + 1]; ++k) {
                    const int32_t e = eidx[static_cast<size_t>(k)];
                    const int32_t t = g.ed[e];
                    const size_t tw = static_cast<size_t>(t) >> 6;
                    const uint64_t tb = uint64_t{1} << (t & 63);
                    uint64_t m[4];  // bit b: byte b (bit b % 8 of byte b / 8, little-endian words)
                    std::memcpy(m, g.bits + static_cast<size_t>(e) * 32, 32);
                    for (int q = 0; q < 4; ++q) {
                        for (uint64_t y = m[q] & ~used[q]; y; y &= y - 1)  // first use: cleared
                            std::fill_n(next.data() + (static_cast<size_t>(q) * 64 + static_cast<size_t>(__builtin_ctzll(y))) * W, W, 0);
                        used[q] |= m[q];
                        for (uint64_t y = m[q]; y; y &= y - 1)
                            next[(static_cast<size_t>(q) * 64 + static_cast<size_t>(__builtin_ctzll(y))) * W + tw] |= tb;
                    }
                }
            }
        int last = -1;  // the previous byte whose target was found: an equal set has its target
        int32_t last_id = -1;
        for (int q = 0; q < 4; ++q)
            for (uint64_t y = used[q]; y; y &= y - 1) {
                const int b = q * 64 + __builtin_ctzll(y);
                const uint64_t* nb = next.data() + static_cast<size_t>(b) * W;
                if (last < 0 || std::memcmp(nb, next.data() + static_cast<size_t>(last) * W, W * 8) != 0) {
                    std::memcpy(set.data(), nb, W * 8);
                    close(set.data());
                    last = b;
                    last_id = id_of(set.data());
                }
                out.src.push_back(static_cast<int32_t>(i));
                out.byte.push_back(b);
                out.dst.push_back(last_id);
            }
        if (max_states > 0 && static_cast<long long>(out.accept.size()) > max_states)
            return false;  // (a pattern like (a|b)*a(a|b){19} has 2**20 states)
    }
    return true;
}

// The regular-expression subset of JSON Schema ``pattern`` (the reference: the parser of
// trierouter/registry/slots/regex.py and the Thompson construction of nfa.py's _Nfa.build,
// mirrored step for step, so that the NFA and hence the DFA are the same): ASCII patterns
// whose every match needs no JSON escaping.
struct RxNode {
    char kind;               // 's' set, 'q' seq, 'a' alt, 'r' rep
    uint64_t chars[4] = {};  // 's': the bytes
    std::vector<int32_t> parts;
    int lo = 0, hi = 0;  // 'r': hi < 0 is unbounded
};

struct RxUnsupported {};
struct RxTooMany {};

struct RxChars {
    uint64_t w[4] = {};
    void add(int c) { w[c >> 6] |= uint64_t{1} << (c & 63); }
    bool has(int c) const { return w[c >> 6] >> (c & 63) & 1; }
    bool empty() const { return !(w[0] | w[1] | w[2] | w[3]); }
    int count() const {
        return __builtin_popcountll(w[0]) + __builtin_popcountll(w[1]) + __builtin_popcountll(w[2]) +
               __builtin_popcountll(w[3]);
    }
    int only() const {  // the one member (count() == 1)
        for (int k = 0; k < 4; ++k)
            if (w[k]) return k * 64 + __builtin_ctzll(w[k]);
        return -1;
    }
};

inline bool rx_safe_char(int c) { return c >= 0x20 && c < 0x7F && c != 0x22 && c != 0x5C; }

struct RxParser {
    const char* s;
    int64_t n, max_depth;  // groups nested deeper: unsupported
    int64_t i = 0, end = 0, depth = 0;
    std::vector<RxNode> nodes;

    int32_t node(RxNode&& x) {
        nodes.push_back(std::move(x));
        return static_cast<int32_t>(nodes.size()) - 1;
    }
    int32_t set_node(const RxChars& c) {
        RxNode x{'s'};
        std::memcpy(x.chars, c.w, sizeof x.chars);
        return node(std::move(x));
    }
    char at(int64_t k) const {  // s[k] (Python: IndexError past the end, unsupported here)
        if (k >= n) throw RxUnsupported{};
        return s[k];
    }
    int peek() const { return i < end ? static_cast<unsigned char>(s[i]) : -1; }
    bool starts(int64_t k, const char* t) const {
        for (; *t; ++t, ++k)
            if (k >= n || s[k] != *t) return false;
        return true;
    }

    int32_t parse() {
        if (n > 0 && s[0] == '^') i = 1;
        const bool anchored = n > 0 && s[n - 1] == '$' && !(n > 1 && s[n - 2] == '\\');
        end = anchored ? n - 1 : n;
        const int32_t x = alt();
        if (i != end) throw RxUnsupported{};
        return x;
    }
    int32_t alt() {
        std::vector<int32_t> parts{seq()};
        while (peek() == '|') {
            ++i;
            parts.push_back(seq());
        }
        if (parts.size() == 1) return parts[0];
        RxNode x{'a'};
        x.parts = std::move(parts);
        return node(std::move(x));
    }
    int32_t seq() {
        std::vector<int32_t> items;
        for (int c = peek(); c >= 0 && c != '|' && c != ')'; c = peek()) items.push_back(quant(atom()));
        RxNode x{'q'};
        x.parts = std::move(items);
        return node(std::move(x));
    }
    int32_t rep(int32_t inner, int lo, int hi) {
        RxNode x{'r'};
        x.parts = {inner};
        x.lo = lo;
        x.hi = hi;
        return node(std::move(x));
    }
    int32_t quant(int32_t x) {
        const int32_t out = quant1(x);
        if (out != x) {
            const int nxt = peek();
            if (nxt == '?') ++i;  // lazy: the same language under a full match
            else if (nxt == '*' || nxt == '+' || nxt == '{') throw RxUnsupported{};
        }
        return out;
    }
    // the decimal at s[k] (ASCII digits, at least one): its value (saturated), k moved past it
    static bool digits(const char* s, int64_t lim, int64_t& k, long long& v) {
        const int64_t k0 = k;
        v = 0;
        while (k < lim && s[k] >= '0' && s[k] <= '9') {
            v = std::min<long long>(v * 10 + (s[k] - '0'), 1000000);
            ++k;
        }
        return k > k0;
    }
    int32_t quant1(int32_t x) {
        const int c = peek();
        if (c == '?') {
            ++i;
            return rep(x, 0, 1);
        }
        if (c == '*') {
            ++i;
            return rep(x, 0, -1);
        }
        if (c == '+') {
            ++i;
            return rep(x, 1, -1);
        }
        if (c == '{') {
            long long lo, hi;
            const int64_t k = quantifier(i, lo, hi);
            if (k < 0) throw RxUnsupported{};
            i = k;
            if (lo > 64 || hi > 64 || (hi >= 0 && hi < lo)) throw RxUnsupported{};
            return rep(x, static_cast<int>(lo), static_cast<int>(hi));
        }
        return x;
    }
    // \{(\d+)(,(\d*))?\} at s[k], within s[:end]: the index past it (-1: none), its bounds
    // (hi -1: unbounded)
    int64_t quantifier(int64_t k, long long& lo, long long& hi) const {
        if (!(k < end && s[k] == '{')) return -1;
        ++k;
        if (!digits(s, end, k, lo)) return -1;
        if (k < end && s[k] == ',') {
            ++k;
            if (!digits(s, end, k, hi)) hi = -1;
        } else {
            hi = lo;
        }
        if (!(k < end && s[k] == '}')) return -1;
        return k + 1;
    }
    RxChars safe(const RxChars& c) const {
        if (c.empty()) throw RxUnsupported{};
        for (int b = 0; b < 256; ++b)
            if (c.has(b) && !rx_safe_char(b)) throw RxUnsupported{};
        return c;
    }
    RxChars escape() {
        const char c = at(i);
        ++i;
        RxChars out;
        if (c == 'd' || c == 'w') {
            for (int b = '0'; b <= '9'; ++b) out.add(b);
            if (c == 'w') {
                for (int b = 'A'; b <= 'Z'; ++b) out.add(b);
                for (int b = 'a'; b <= 'z'; ++b) out.add(b);
                out.add('_');
            }
            return out;
        }
        if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) throw RxUnsupported{};
        out.add(static_cast<unsigned char>(c));
        return safe(out);
    }
    RxChars klass() {
        const bool negate = peek() == '^';
        if (negate) ++i;
        RxChars chars;
        bool first = true;
        while (true) {
            if (i >= end) throw RxUnsupported{};
            const char c = s[i];
            if (c == ']' && !first) {
                ++i;
                break;
            }
            first = false;
            ++i;
            RxChars lo_set;
            if (c == '\\') lo_set = escape();
            else lo_set.add(static_cast<unsigned char>(c));
            if (lo_set.count() != 1 && peek() == '-' && i + 1 < end && s[i + 1] != ']')
                throw RxUnsupported{};  // a class escape begins a range
            if (lo_set.count() == 1 && peek() == '-' && i + 1 < end && s[i + 1] != ']') {
                ++i;
                const char hi_c = at(i);
                ++i;
                int hi;
                if (hi_c == '\\') {
                    const RxChars hs = escape();
                    if (hs.count() != 1) throw RxUnsupported{};
                    hi = hs.only();
                } else {
                    hi = static_cast<unsigned char>(hi_c);
                }
                if (hi < lo_set.only()) throw RxUnsupported{};  // (a bad range to re)
                for (int b = lo_set.only(); b <= hi; ++b) chars.add(b);
            } else {
                for (int k = 0; k < 4; ++k) chars.w[k] |= lo_set.w[k];
            }
        }
        if (negate) {
            RxChars all;
            for (int b = 0; b < 256; ++b)
                if (rx_safe_char(b) && !chars.has(b)) all.add(b);
            chars = all;
        }
        return safe(chars);
    }
    int32_t atom() {
        const char c = at(i);
        ++i;
        if (c == '(') {
            if (starts(i, "?:")) i += 2;
            else if (starts(i, "?")) throw RxUnsupported{};
            if (++depth > max_depth) throw RxUnsupported{};  // (the recursion's bound)
            const int32_t x = alt();
            if (peek() != ')') throw RxUnsupported{};
            ++i;
            --depth;
            return x;
        }
        if (c == '[') return set_node(klass());
        if (c == '\\') return set_node(escape());
        if (c == '.' || c == '^' || c == '$' || c == '*' || c == '+' || c == '?') throw RxUnsupported{};
        long long lo, hi;
        if (c == '{' && quantifier(i - 1, lo, hi) >= 0) throw RxUnsupported{};  // nothing to repeat
        RxChars one;
        one.add(static_cast<unsigned char>(c));
        return set_node(safe(one));
    }
};

// _Nfa.build of nfa.py: states numbered as added, the edges and epsilon edges of each state in
// the order added.
struct RxNfa {
    const std::vector<RxNode>& nodes;
    int64_t cap;
    std::vector<int32_t> es, ed, xs, xd;
    std::vector<uint8_t> bits;
    int32_t n = 0;

    int32_t state() {
        if (n >= cap) throw RxTooMany{};
        return n++;
    }
    void eps(int32_t a, int32_t b) {
        xs.push_back(a);
        xd.push_back(b);
    }
    int32_t build(int32_t id, int32_t start) {
        const RxNode& x = nodes[static_cast<size_t>(id)];
        if (x.kind == 's') {
            const int32_t end = state();
            es.push_back(start);
            ed.push_back(end);
            const uint8_t* c = reinterpret_cast<const uint8_t*>(x.chars);  // little-endian words:
            bits.insert(bits.end(), c, c + 32);  // byte b / 8, bit b % 8
            return end;
        }
        if (x.kind == 'q') {
            int32_t cur = start;
            for (int32_t p : x.parts) cur = build(p, cur);
            return cur;
        }
        if (x.kind == 'a') {
            const int32_t end = state();
            for (int32_t p : x.parts) {
                const int32_t s = state();
                eps(start, s);
                eps(build(p, s), end);
            }
            return end;
        }
        const int32_t inner = x.parts[0];
        int32_t cur = start;
        for (int k = 0; k < x.lo; ++k) cur = build(inner, cur);
        if (x.hi < 0) {
            const int32_t loop = state();
            eps(cur, loop);
            eps(build(inner, loop), loop);
            return loop;
        }
        const int32_t end = state();
        eps(cur, end);
        for (int k = 0; k < x.hi - x.lo; ++k) {
            cur = build(inner, cur);
            eps(cur, end);
        }
        return end;
    }
};


int regex_dfa(const char* s, int64_t n, bool quoted, long long max_states, long long max_nfa, long long max_depth, Dfa& dfa) {
    RxParser p{s, static_cast<int64_t>(n), max_depth};
    int verdict = -1;  // -1: built
    try {
        int32_t root = p.parse();
        if (quoted) {  // seq(lit('"'), node, lit('"')): lit is a seq of one set
            RxChars q;
            q.add('"');
            RxNode a{'q'}, b{'q'}, top{'q'};
            a.parts = {p.set_node(q)};
            const int32_t ia = p.node(std::move(a));
            b.parts = {p.set_node(q)};
            const int32_t ib = p.node(std::move(b));
            top.parts = {ia, root, ib};
            root = p.node(std::move(top));
        }
        RxNfa g{p.nodes, max_nfa};
        const int32_t start = g.state();
        const int32_t final = g.build(root, start);
        // (the order of the edges is the reference's up to their order per state, on which the
        // subset construction does not depend)
        const NfaEdges nfa{g.n, g.es.data(), g.ed.data(), g.xs.data(), g.xd.data(), g.bits.data(),
                           static_cast<int64_t>(g.es.size()), static_cast<int64_t>(g.xs.size())};
        bool fits = true;
        fits = determinize(nfa, start, final, max_states, dfa);
        if (!fits) verdict = 1;
    } catch (const RxUnsupported&) {
        verdict = 0;
    } catch (const RxTooMany&) {
        verdict = 2;
    }
    return verdict;
}

}  // namespace trierouter
