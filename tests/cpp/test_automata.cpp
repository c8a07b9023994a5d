// The regex subset to a DFA, integer ranges as automata, byte-class compression and the token
// trie on a toy vocabulary, against std::regex and brute force.
#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "automata.h"
#include "check.h"
#include "formats.h"
#include "regex.h"
#include "support/sort.h"
#include "token_trie.h"

using namespace trierouter;

namespace {

// Whether ``d`` (start state 0) accepts ``s``.
bool accepts(const Dfa& d, const std::string& s) {
    std::map<std::pair<int32_t, int32_t>, int32_t> go;
    for (size_t e = 0; e < d.src.size(); ++e) go[{d.src[e], d.byte[e]}] = d.dst[e];
    int32_t q = 0;
    for (unsigned char c : s) {
        auto it = go.find({q, static_cast<int32_t>(c)});
        if (it == go.end()) return false;
        q = it->second;
    }
    return d.accept[static_cast<size_t>(q)] != 0;
}

// Every string over ``alphabet`` of at most ``max_len`` bytes.
std::vector<std::string> all_strings(const std::string& alphabet, size_t max_len) {
    std::vector<std::string> out{""};
    for (size_t k = 0; k < out.size(); ++k)
        if (out[k].size() < max_len)
            for (char c : alphabet) out.push_back(out[k] + c);
    return out;
}

}  // namespace

TEST(regex_dfa_matches_std_regex) {
    const char* patterns[] = {"[a-c]+x", "^(ab|c){1,2}x?$", "a*b?c{2}", "[^a]b|a(b|c)*", "x{0,3}"};
    const std::vector<std::string> texts = all_strings("abcx", 5);
    for (const char* pat : patterns) {
        Dfa d;
        const std::string p(pat);
        CHECK_EQ(regex_dfa(p.data(), static_cast<int64_t>(p.size()), false, 10000, 100000, 64, d), -1);
        std::string ecma = p;
        if (ecma.front() == '^') ecma = ecma.substr(1);
        if (ecma.back() == '$') ecma.pop_back();
        const std::regex re(ecma);
        int wrong = 0;
        for (const std::string& t : texts) wrong += accepts(d, t) != std::regex_match(t, re);
        CHECK_EQ(wrong, 0);
    }
    Dfa quoted;
    CHECK_EQ(regex_dfa("a+", 2, true, 10000, 100000, 64, quoted), -1);
    CHECK(accepts(quoted, "\"aa\"") && !accepts(quoted, "aa") && !accepts(quoted, "\"\""));
}

TEST(regex_dfa_refusals) {
    Dfa d;
    CHECK_EQ(regex_dfa("(?=a)", 5, false, 1000, 1000, 64, d), 0);    // lookahead: unsupported
    CHECK_EQ(regex_dfa("((a))", 5, false, 1000, 1000, 1, d), 0);     // nested past max_depth
    CHECK_EQ(regex_dfa("[ab]{1,40}", 10, false, 5, 100000, 64, d), 1);  // past max_states
    CHECK_EQ(regex_dfa("[ab]{1,40}", 10, false, 100000, 20, 64, d), 2);  // past max_nfa
}

TEST(int_range_dfa_brute_force) {
    Dfa d;
    int_range_dfa(true, "1", "150", "1", "50", d);  // -50 .. 150
    int wrong = 0;
    for (const std::string& t : all_strings("-0123456789", 4)) {
        bool canonical = !t.empty() && t != "-" && t != "-0";
        const size_t digits = t[0] == '-' ? 1 : 0;
        for (size_t k = digits; k < t.size() && canonical; ++k) canonical = t[k] != '-';
        if (canonical && t.size() > digits + 1 && t[digits] == '0') canonical = false;
        const bool want = canonical && std::stol(t) >= -50 && std::stol(t) <= 150;
        wrong += accepts(d, t) != want;
    }
    CHECK_EQ(wrong, 0);
    Dfa pos;
    int_range_dfa(false, "7", "", "", "", pos);  // >= 7, no zero, no negatives
    CHECK(accepts(pos, "7") && accepts(pos, "123456") && !accepts(pos, "6") && !accepts(pos, "0") && !accepts(pos, "-1"));
}

TEST(compress_run_byte_classes) {
    // 0 -a-> 1, 0 -b-> 1, 1 -c-> 2: bytes a and b behave alike everywhere, c differs
    const int32_t src[] = {0, 0, 1}, byte[] = {'a', 'b', 'c'}, dst[] = {1, 1, 2};
    Buf<int32_t> table;
    int32_t cls[256];
    int64_t nk = 0;
    CHECK(compress_run(src, byte, dst, 3, 3, table, cls, nk));
    CHECK(cls['a'] == cls['b'] && cls['a'] != cls['c'] && cls['a'] != cls['z']);
    CHECK_EQ(nk, 3);  // {a, b}, {c}, every other byte
    CHECK_EQ(table[static_cast<size_t>(0 * nk + cls['a'])], 1);
    CHECK_EQ(table[static_cast<size_t>(1 * nk + cls['c'])], 2);
    CHECK_EQ(table[static_cast<size_t>(1 * nk + cls['a'])], -1);
}

// list_masks: per state, the candidate tokens whose bytes all have edges from it, against a
// brute-force walk of each token over the dense table.
TEST(list_masks_brute_force) {
    // 0 -a-> 1 -b-> 2 -a-> 1, and 0 -c-> 0: bytes a, b, c in classes 1, 2, 3; every other byte 0
    constexpr int64_t kClasses = 4;
    const int32_t tab[] = {-1, 1, -1, 0, -1, -1, 2, -1, -1, 1, -1, -1};
    int32_t cls[256] = {};
    cls['a'] = 1, cls['b'] = 2, cls['c'] = 3;
    const std::vector<std::string> tokens = {"a", "ab", "ba", "cab", "abab", "b", "x", "ccc"};
    std::vector<uint8_t> buf;
    std::vector<int64_t> off{0};
    for (const std::string& t : tokens) {
        buf.insert(buf.end(), t.begin(), t.end());
        off.push_back(static_cast<int64_t>(buf.size()));
    }
    const std::vector<int32_t> cands = {7, 0, 4, 1, 2, 3, 5, 6};  // unsorted on purpose
    const std::vector<int64_t> states = {0, 1, 2, 0};
    Buf<int64_t> ptr;
    Buf<int32_t> ids;
    CHECK(list_masks(tab, kClasses, cls, states.data(), 4, cands.data(), 8, buf.data(), off.data(), ptr, ids));
    for (size_t i = 0; i < states.size(); ++i) {
        std::vector<int32_t> want;
        for (int32_t t : cands) {
            int32_t q = static_cast<int32_t>(states[i]);
            for (unsigned char ch : tokens[static_cast<size_t>(t)]) q = q < 0 ? q : tab[q * kClasses + cls[ch]];
            if (q >= 0) want.push_back(t);
        }
        std::sort(want.begin(), want.end());
        const std::vector<int32_t> got(ids.p + ptr[i], ids.p + ptr[i + 1]);
        CHECK(got == want);
    }
    CHECK_EQ(ptr[1] - ptr[0], 5);  // from 0: a, ab, cab, abab, ccc
}

TEST(token_trie_toy_vocabulary) {
    // ids 0..8; "ab" twice (ids 2 and 7); id 8 empty (never matchable)
    const std::vector<std::string> vocab = {"a", "b", "ab", "abc", "bc", "c", "ca", "ab", ""};
    BigVec<Ent> ents;
    for (size_t i = 0; i < vocab.size(); ++i)
        if (!vocab[i].empty())
            ents.push_back({{reinterpret_cast<const uint8_t*>(vocab[i].data()), static_cast<int64_t>(vocab[i].size())}, static_cast<int32_t>(i)});
    TokenTrie t{};
    build_token_trie(t, ents, static_cast<int32_t>(vocab.size()));
    CHECK_EQ(t.n_nodes, 8);  // root, a, ab, abc, b, bc, c, ca
    const TT tt(&t);
    // each token's bytes lead from the root to a node holding its id
    for (size_t i = 0; i + 1 < vocab.size(); ++i) {
        int32_t u = 0;
        for (unsigned char c : vocab[i]) u = u < 0 ? -1 : tt.child(u, c);
        CHECK(u > 0);
        bool found = false;
        for (int32_t k = tt.tptr[u]; k < tt.tptr[u + 1]; ++k) found = found || tt.tids[k] == static_cast<int32_t>(i);
        CHECK(found);
    }
    CHECK(t.single['a'] && t.single['c'] && !t.single['z']);
    // Aho-Corasick: after each byte of a text, the state's outputs are the tokens that are
    // suffixes of the text so far
    const std::string text = "abcabcab";
    int32_t s = 0;
    for (size_t e = 1; e <= text.size(); ++e) {
        s = tt.go(s, static_cast<uint8_t>(text[e - 1]));
        std::set<int32_t> got, want;
        for (int32_t k = tt.si[s].olo; k < tt.si[s].ohi; ++k) got.insert(tt.outs[k].token);
        for (size_t i = 0; i < vocab.size(); ++i)
            if (!vocab[i].empty() && vocab[i].size() <= e && text.compare(e - vocab[i].size(), vocab[i].size(), vocab[i]) == 0)
                want.insert(static_cast<int32_t>(i));
        CHECK(got == want);
    }
    const TrieShape* shape = trie_shape(&t);
    CHECK(shape->ok && shape->max_len == 3);
    destroy_token_trie(t);
}
