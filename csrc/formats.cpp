// Fixed formats and key automata (see formats.h).
#include "formats.h"

namespace trierouter {

bool all_of_char(const std::string& s, size_t from, char c) {
    for (size_t i = from; i < s.size(); ++i)
        if (s[i] != c) return false;
    return true;
}

bool dec_le(const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a <= b;
}

RangeKey range_start(const std::string& lo, const std::string& hi) {
    RangeKey out;
    if (lo.empty() || (!hi.empty() && !dec_le(lo, hi))) return out;
    const size_t na = lo.size(), nb = hi.empty() ? na : hi.size();
    for (size_t n = na; n <= nb; ++n) {
        const std::string low_n = "1" + std::string(n - 1, '0'), high_n(n, '9');
        const std::string first = dec_le(low_n, lo) ? lo : low_n;
        const std::string last = (!hi.empty() && dec_le(hi, high_n)) ? hi : high_n;
        if (dec_le(first, last)) out.push_back({static_cast<int>(n), 0, first, last});
    }
    if (hi.empty()) out.push_back({-2, static_cast<int>(na) + 1, "", ""});
    // as the Python start: the bounds of a full-width element are kept whole (normalized on step)
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void range_step(const RangeKey& key, char d, RangeKey& out) {
    out.clear();
    for (const RangeElem& e : key) {
        if (e.r < 0) {
            if (e.r == -1 || d != '0') {
                out.emplace_back();
                RangeElem& o = out.back();
                o.r = -1;
                o.t = std::max(e.t - 1, 0);
                o.low.clear();
                o.high.clear();
            }
            continue;
        }
        if (e.r == 0) continue;
        size_t lo_from = 0, hi_from = 0;  // the rest of low / high from there ("" past the end)
        bool lo_any = e.low.empty(), hi_any = e.high.empty();
        if (!lo_any) {
            if (d < e.low[0]) continue;
            if (d == e.low[0] && !all_of_char(e.low, 1, '0')) lo_from = 1;
            else lo_any = true;
        }
        if (!hi_any) {
            if (d > e.high[0]) continue;
            if (d == e.high[0] && !all_of_char(e.high, 1, '9')) hi_from = 1;
            else hi_any = true;
        }
        out.emplace_back();
        RangeElem& o = out.back();
        o.r = e.r - 1;
        o.t = 0;
        if (lo_any) o.low.clear();
        else o.low.assign(e.low, lo_from, std::string::npos);
        if (hi_any) o.high.clear();
        else o.high.assign(e.high, hi_from, std::string::npos);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
}

uint64_t range_key_hash(const RangeKey& k) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x100000001b3ull; };
    for (const RangeElem& e : k) {
        mix(static_cast<uint32_t>(e.r));
        mix(static_cast<uint32_t>(e.t));
        for (char c : e.low) mix(static_cast<uint8_t>(c));
        mix(0x100);
        for (char c : e.high) mix(static_cast<uint8_t>(c));
        mix(0x101);
    }
    return h;
}

void int_range_dfa(bool zero, const char* pl, const char* ph, const char* nl, const char* nh, Dfa& out) {
    out.accept.push_back(0);
    std::vector<int32_t>& src = out.src;
    std::vector<int32_t>& byte = out.byte;
    std::vector<int32_t>& dst = out.dst;
    std::vector<uint8_t>& acc = out.accept;
    std::unordered_multimap<uint64_t, int32_t> ids;  // a key's hash -> states (keys compared)
    ids.reserve(64);
    std::vector<RangeKey> order;
    auto state = [&](const RangeKey& k) {
        const uint64_t h = range_key_hash(k);
        for (auto [it, end] = ids.equal_range(h); it != end; ++it)
            if (order[static_cast<size_t>(it->second) - 1] == k) return it->second;
        const int32_t id = static_cast<int32_t>(order.size()) + 1;
        ids.emplace(h, id);
        bool a = false;
        for (const RangeElem& e : k) a = a || (e.r == 0) || (e.r == -1 && e.t == 0);
        acc.push_back(a);
        order.push_back(k);
        return id;
    };
    const RangeKey pos = range_start(pl, ph), neg = range_start(nl, nh);
    RangeKey nxt;
    for (char d : std::string("-0123456789")) {
        nxt.clear();
        if (d == '-') nxt = neg;
        else if (d == '0') { if (zero) nxt.push_back({0, 0, "", ""}); }
        else if (!pos.empty()) range_step(pos, d, nxt);
        if (nxt.empty()) continue;
        src.push_back(0);
        byte.push_back(d);
        dst.push_back(state(nxt));
    }
    for (size_t i = 0; i < order.size(); ++i)
        for (char d = '0'; d <= '9'; ++d) {
            range_step(order[i], d, nxt);  // order may grow in state(): order[i] read first
            if (nxt.empty()) continue;
            src.push_back(static_cast<int32_t>(i) + 1);
            byte.push_back(d);
            dst.push_back(state(nxt));
        }
}

int key_automaton(const std::vector<std::string_view>& texts, const char* req, KeyAutomaton& out) {
    const int64_t n = static_cast<int64_t>(texts.size());
    Buf<int32_t>&src = out.src, &byte = out.byte, &dst = out.dst, &exs = out.exs, &exk = out.exk;
    bool ok = true;
    int64_t& count = out.count;
    count = 3;
    try {
        const size_t nn = static_cast<size_t>(n);
        std::vector<size_t> unique(nn, 1), order(nn);
        for (size_t j = 0; j < nn; ++j) order[j] = j;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return texts[a] < texts[b]; });
        for (size_t k = 0; k + 1 < nn; ++k) {
            const std::string_view x = texts[order[k]], y = texts[order[k + 1]];
            size_t c = 0;
            while (c < x.size() && c < y.size() && x[c] == y[c]) ++c;
            unique[order[k]] = std::max(unique[order[k]], c + 1);
            unique[order[k + 1]] = std::max(unique[order[k + 1]], c + 1);
        }
        // a trie of those prefixes, children in insertion order; through[node]: keys, ascending
        std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
        std::vector<std::vector<int32_t>> through(1);
        std::vector<int32_t> depth(1, 0);
        for (size_t j = 0; j < nn; ++j) through[0].push_back(static_cast<int32_t>(j));
        for (size_t j = 0; j < nn; ++j) {
            int32_t node = 0;
            const size_t top = std::min(unique[j], texts[j].size());
            for (size_t i = 0; i < top; ++i) {
                const uint8_t b = static_cast<uint8_t>(texts[j][i]);
                int32_t nxt = -1;
                for (const auto& [lab, ch] : children[static_cast<size_t>(node)])
                    if (lab == b) {
                        nxt = ch;
                        break;
                    }
                if (nxt < 0) {
                    nxt = static_cast<int32_t>(children.size());
                    children[static_cast<size_t>(node)].emplace_back(b, nxt);
                    children.emplace_back();
                    through.emplace_back();
                    depth.push_back(depth[static_cast<size_t>(node)] + 1);
                }
                node = nxt;
                through[static_cast<size_t>(node)].push_back(static_cast<int32_t>(j));
            }
        }
        std::vector<int32_t> last(nn + 1, static_cast<int32_t>(n) - 1);
        std::vector<uint8_t> optional_from(nn + 1, 1);
        size_t r = nn;
        for (size_t i = nn; i-- > 0;) {
            if (req[i]) r = i;
            last[i] = static_cast<int32_t>(std::min(r, nn - 1));
            optional_from[i] = r == nn;
        }
        auto edge = [&](int64_t s, int b, int64_t d) {
            ok = ok && src.push(static_cast<int32_t>(s)) && byte.push(b) && dst.push(static_cast<int32_t>(d));
        };
        const int64_t opened = 1, end = 2;
        edge(0, '{', opened);
        auto entry = [&](size_t i) -> int64_t { return i == 0 ? 0 : 3 + static_cast<int64_t>(i) - 1; };
        count += n;
        struct Key {
            int32_t node, a, b;
            bool operator==(const Key& o) const { return node == o.node && a == o.a && b == o.b; }
        };
        struct KeyHash {
            size_t operator()(const Key& k) const {
                return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(k.node)) << 40) ^
                                             (static_cast<uint64_t>(static_cast<uint32_t>(k.a)) << 20) ^
                                             static_cast<uint64_t>(static_cast<uint32_t>(k.b)));
            }
        };
        std::unordered_map<Key, int64_t, KeyHash> ids;
        std::vector<Key> todo;
        struct Alone {
            int64_t from;
            int b;
            int32_t key, depth;
        };
        std::vector<Alone> alone;
        for (size_t i = 0; i <= nn; ++i) {
            const int64_t at = i == 0 ? opened : entry(i);
            if (optional_from[i]) edge(at, '}', end);
            if (i == nn) continue;
            const int32_t ii = static_cast<int32_t>(i);
            if (i == 0) {
                ids[Key{0, 0, last[0]}] = opened;
                todo.push_back(Key{0, 0, last[0]});
                continue;
            }
            const int64_t comma = count++;
            edge(at, ',', comma);
            if (ii == last[i]) {
                alone.push_back(Alone{comma, ' ', ii, 0});
                continue;
            }
            const int64_t s = count++;
            ids[Key{0, ii, last[i]}] = s;
            todo.push_back(Key{0, ii, last[i]});
            edge(comma, ' ', s);
        }
        while (!todo.empty()) {
            const Key k = todo.back();
            todo.pop_back();
            const int64_t s = ids[k];
            for (const auto& [c, child] : children[static_cast<size_t>(k.node)]) {
                const std::vector<int32_t>& here = through[static_cast<size_t>(child)];
                const auto lo = std::lower_bound(here.begin(), here.end(), k.a);
                const auto hi = std::upper_bound(here.begin(), here.end(), k.b);
                if (lo >= hi) continue;
                const int32_t first = *lo, lastk = *(hi - 1);
                if (first == lastk) {
                    alone.push_back(Alone{s, c, first, depth[static_cast<size_t>(child)]});
                    continue;
                }
                const Key nk{child, first, lastk};
                auto it = ids.find(nk);
                int64_t t;
                if (it == ids.end()) {
                    t = count++;
                    ids.emplace(nk, t);
                    todo.push_back(nk);
                } else {
                    t = it->second;
                }
                edge(s, c, t);
            }
        }
        // each key's chain, from the shallowest depth a window reaches it alone, as one run
        std::vector<int64_t> shallow(nn, int64_t{1} << 30), base(nn, 0);
        for (const Alone& a : alone) shallow[static_cast<size_t>(a.key)] = std::min<int64_t>(shallow[static_cast<size_t>(a.key)], a.depth);
        ok = ok && exs.push(static_cast<int32_t>(end)) && exk.push(-1);
        for (size_t j = 0; j < nn && ok; ++j) {
            const int64_t d = shallow[j];
            const int64_t len = static_cast<int64_t>(texts[j].size());
            if (d > len) continue;
            base[j] = count - d;
            for (int64_t x = d; x < len; ++x) {
                const int64_t s = count + (x - d);
                edge(s, static_cast<uint8_t>(texts[j][static_cast<size_t>(x)]), s + 1);
            }
            count += len - d + 1;
            ok = ok && exs.push(static_cast<int32_t>(count - 1)) && exk.push(static_cast<int32_t>(j));
        }
        for (const Alone& a : alone) edge(a.from, a.b, base[static_cast<size_t>(a.key)] + a.depth);
        if (count > (int64_t{1} << 31) - 1) {
            return 2;
        }
    } catch (const std::bad_alloc&) {
        ok = false;
    }
    return ok ? 0 : 1;
}

}  // namespace trierouter
