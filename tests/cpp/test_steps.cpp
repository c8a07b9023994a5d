// Serving (steps.h) over a set compiled from a toy vocabulary: steps along the values'
// tokens, refusals, packed rows and batches, against the rows the compile wrote.
#include <string>
#include <vector>

#include "check.h"
#include "compile.h"
#include "steps.h"
#include "token_trie.h"
#include "toy.h"

using namespace trierouter;

TEST(serving_steps_rows_and_batches) {
    const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "ca", "abc"};
    constexpr int32_t kEnd = 9;
    TokenTrie trie{};
    toy::build_trie(trie, vocab);
    const std::vector<std::string> values = {"abc", "ab", "cab", "bca", "cc"};
    CompileOutput o;
    CHECK(toy::compile(values, trie, kEnd, 1, o) == CompileStatus::kOk);
    const int64_t n = static_cast<int64_t>(o.row_ptr.size()) - 3;
    const Serving c{o.row_ptr.p, o.tokens.p, o.children.p, o.far_pos.p, o.far_child.p, o.ends.p,
                    static_cast<int64_t>(o.far_pos.size()), static_cast<int64_t>(o.ends.size()), n + 2,
                    static_cast<int64_t>(o.tokens.size()), n, n + 1, 32, 1, nullptr};
    // every value, spelled one byte token at a time, then ended
    for (const std::string& v : values) {
        int64_t s = 0;
        for (char b : v) s = core_advance(&c, s, b - 'a');
        CHECK(s > 0 && s < n);
        CHECK_EQ(core_advance(&c, s, kEnd), n);
    }
    // a multi-byte token lands where its bytes do; refusals go to DEAD
    CHECK_EQ(core_advance(&c, 0, 6), core_advance(&c, core_advance(&c, core_advance(&c, 0, 0), 1), 2));  // "abc"
    CHECK_EQ(core_advance(&c, 0, kEnd), n + 1);    // "" is not a value
    CHECK(core_advance(&c, 0, 4) < n);                               // "bc": a prefix of "bca"
    CHECK_EQ(core_advance(&c, core_advance(&c, 0, 2), 4), n + 1);  // "cbc": no value's prefix
    CHECK_EQ(core_advance(&c, -3, 0), n + 1);      // an invalid state
    CHECK_EQ(core_advance(&c, n + 7, 0), n + 1);
    // packed rows hold exactly each row's ids
    int wrong = 0;
    for (int64_t s = 0; s < n; ++s) {
        int32_t row = -1;
        fill_row(&c, s, &row, 1);
        uint32_t want = 0;
        std::vector<int32_t> ids;
        int64_t k = 0;
        const int32_t* p = row_ids(&c, s, &k, ids);
        for (int64_t j = 0; j < k; ++j) want |= 1u << p[j];
        wrong += static_cast<uint32_t>(row) != want;
    }
    CHECK_EQ(wrong, 0);
    // a batch fill (rows out of order, states out of range among them) writes each row as
    // fill_row does, and nothing else
    {
        const std::vector<int64_t> st = {n - 1, -5, 0, n + 9, 2};
        const std::vector<int64_t> target = {4, 0, 2, 3, 1};
        std::vector<int32_t> rows(6, 0x5a5a5a5a), want(6, 0x5a5a5a5a);
        for (size_t i = 0; i < st.size(); ++i) fill_row(&c, st[i], &want[static_cast<size_t>(target[i])], 1);
        fill_rows(&c, false, st.data(), target.data(), 5, reinterpret_cast<char*>(rows.data()), 4, 1);
        CHECK(rows == want);
    }
    // a batch of steps: each as core_advance
    std::vector<int64_t> states, tokens, out;
    for (int64_t s = -1; s <= n + 2; ++s)
        for (int64_t t = -1; t <= kEnd; ++t) {
            states.push_back(s);
            tokens.push_back(t);
        }
    out.resize(states.size());
    advance_batch(&c, states.data(), tokens.data(), static_cast<int64_t>(states.size()), out.data());
    wrong = 0;
    for (size_t i = 0; i < states.size(); ++i) wrong += out[i] != core_advance(&c, states[i], tokens[i]);
    CHECK_EQ(wrong, 0);
    destroy_token_trie(trie);
}

// The compact layout (rows of nodes with few values below walked on demand) serves exactly as
// the full one: every (state, token) step and every state's ids, with the dropped rows
// checked against their walk.
TEST(compact_layout_serves_as_the_full_one) {
    const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "ca", "abc", "cab"};
    constexpr int32_t kEnd = 9;
    TokenTrie trie{};
    toy::build_trie(trie, vocab);
    const std::vector<std::string> values = {"abc", "ab", "cab", "bca", "cc", "abcab", "bb", "cabc"};
    CompileOutput o;
    CHECK(toy::compile(values, trie, kEnd, 1, o) == CompileStatus::kOk);
    const int64_t n = static_cast<int64_t>(o.row_ptr.size()) - 3;
    const Serving full{o.row_ptr.p, o.tokens.p, o.children.p, o.far_pos.p, o.far_child.p, o.ends.p,
                       static_cast<int64_t>(o.far_pos.size()), static_cast<int64_t>(o.ends.size()), n + 2,
                       static_cast<int64_t>(o.tokens.size()), n, n + 1, 32, 1, nullptr};
    const std::vector<int32_t> end_ids{kEnd};
    for (long long max_keys : {1LL, 2LL, 100LL}) {
        KeyView keys;
        keys.vb = o.vbytes.p;
        keys.voff = o.voff.p;
        keys.K = static_cast<int64_t>(o.voff.size()) - 1;
        const CompactInput in{o.row_ptr.p, o.tokens.p, o.children.p, o.far_pos.p, o.far_child.p, n + 2,
                              static_cast<int64_t>(o.far_pos.size()), keys, &trie, end_ids, max_keys};
        CompactLayout lay;
        CHECK(compact_layout(in, lay) == CompactStatus::kOk);
        CHECK_EQ(lay.mismatched, 0);
        std::string tbuf;
        std::vector<int64_t> toff{0};
        std::vector<uint8_t> matchable;
        for (const std::string& t : vocab) {
            tbuf += t;
            toff.push_back(static_cast<int64_t>(tbuf.size()));
            matchable.push_back(1);
        }
        CompactWalk walk(&trie);
        walk.bits = lay.bits.p;
        walk.rank = lay.rank.p;
        walk.tbuf = reinterpret_cast<const uint8_t*>(tbuf.data());
        walk.toff = toff.data();
        walk.matchable = matchable.data();
        walk.n_tokens = static_cast<int64_t>(vocab.size());
        walk.keys = keys;
        walk.keys.first = lay.first.p;
        walk.keys.lcp = lay.lcp.p;
        walk.end_ids = end_ids;
        walk.n_nodes = n;
        walk.uid = static_cast<uint64_t>(max_keys);
        const Serving compact{lay.row_ptr.p, lay.tokens.p, lay.children.p, lay.far_pos.p, lay.far_child.p, o.ends.p,
                              static_cast<int64_t>(lay.far_pos.size()), static_cast<int64_t>(o.ends.size()), n + 2,
                              static_cast<int64_t>(lay.tokens.size()), n, n + 1, 32, 1, &walk};
        int64_t walked = 0;
        for (int64_t s = 0; s < n + 2; ++s) walked += stored_row(&compact, s) < 0;
        CHECK(max_keys < 100 ? walked > 0 : walked == n);  // rows dropped (at 100: every node's)
        int wrong = 0;
        for (int64_t s = -1; s <= n + 2; ++s) {
            for (int64_t t = -1; t <= kEnd + 1; ++t) wrong += core_advance(&compact, s, t) != core_advance(&full, s, t);
            if (s < 0 || s >= n) continue;
            int32_t a = 0, b = 0;
            fill_row(&compact, s, &a, 1);
            fill_row(&full, s, &b, 1);
            wrong += a != b;
        }
        CHECK_EQ(wrong, 0);
    }
    destroy_token_trie(trie);
}

// check_serving: the compiled arrays pass; each id out of range is named. Arrays changed after
// the check (a negative id, a row span past the tokens) never make fill_row write outside its
// row nor core_advance return a state out of range.
TEST(serving_arrays_checked_and_ids_guarded) {
    const std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "ca", "abc"};
    constexpr int32_t kEnd = 9;
    TokenTrie trie{};
    toy::build_trie(trie, vocab);
    CompileOutput o;
    CHECK(toy::compile({"abc", "ab", "cab", "bca", "cc"}, trie, kEnd, 1, o) == CompileStatus::kOk);
    const int64_t n = static_cast<int64_t>(o.row_ptr.size()) - 3;
    std::vector<int32_t> row_ptr(o.row_ptr.p, o.row_ptr.p + o.row_ptr.size());
    std::vector<int32_t> tokens(o.tokens.p, o.tokens.p + o.tokens.size());
    std::vector<int32_t> ends(o.ends.p, o.ends.p + o.ends.size());
    const int32_t far_pos[1] = {0}, far_child[1] = {0};
    Serving c{row_ptr.data(), tokens.data(), o.children.p, far_pos, far_child, ends.data(),
              0, static_cast<int64_t>(ends.size()), n + 2, static_cast<int64_t>(tokens.size()), n, n + 1, 32, 1, nullptr};
    std::string why;
    CHECK(check_serving(&c, n + 2, &why) == nullptr);
    auto refused = [&](const char* name) {
        const char* w = check_serving(&c, n + 2, &why);
        return w != nullptr && std::string(w).rfind(name, 0) == 0;
    };
    tokens[1] = -1;
    CHECK(refused("tokens[1] = -1"));
    tokens[1] = 32;  // = width
    CHECK(refused("tokens[1] = 32"));
    tokens[1] = o.tokens.p[1];
    row_ptr[2] = static_cast<int32_t>(tokens.size()) + 1;
    CHECK(refused("row_ptr[2]"));
    row_ptr[2] = o.row_ptr.p[2];
    ends[0] = static_cast<int32_t>(n);  // END is not a completed node
    CHECK(refused("ends[0]"));
    ends[0] = o.ends.p[0];
    c.n_far = 1;
    const int32_t bad_child[1] = {static_cast<int32_t>(n + 2)};
    c.far_child = bad_child;
    CHECK(refused("far_child[0]"));
    c.far_child = far_child;
    c.n_far = 0;
    CHECK(check_serving(&c, n + 2, &why) == nullptr);
    // changed after the check: every id negative, then row spans out of the tokens
    for (int32_t& t : tokens) t = -1 - (&t - tokens.data());
    row_ptr[1] = -5;
    row_ptr[3] = 1 << 30;
    int wrong = 0;
    for (int64_t s = -1; s <= n + 2; ++s) {
        int32_t row[3] = {0x5A5A5A5A, 0x5A5A5A5A, 0x5A5A5A5A};
        fill_row(&c, s, row + 1, 1);
        wrong += row[0] != 0x5A5A5A5A || row[2] != 0x5A5A5A5A;
        for (int64_t t = -2; t <= kEnd; ++t) {
            const int64_t q = core_advance(&c, s, t);
            wrong += q < 0 || q >= (int64_t{1} << 31);
        }
    }
    CHECK_EQ(wrong, 0);
    destroy_token_trie(trie);
}

// The sparse logits kernels (apply_sparse / copy_sparse's rows) against a brute force over the
// row: allowed entries keep (or receive) their values, ids outside 0..V-1 are skipped.
TEST(sparse_row_kernels_match_brute_force) {
    constexpr int64_t V = 11;
    const std::vector<int32_t> ids = {-4, 0, 3, 3, 7, 10, 11, 99};
    auto allowed = [&](int64_t t) {
        for (int32_t i : ids)
            if (i == t) return true;
        return false;
    };
    std::vector<uint32_t> row4(V), keep4;
    std::vector<uint16_t> row2(V), keep2;
    for (int64_t t = 0; t < V; ++t) {
        row4[static_cast<size_t>(t)] = static_cast<uint32_t>(100 + t);
        row2[static_cast<size_t>(t)] = static_cast<uint16_t>(200 + t);
    }
    keep_only(row4.data(), V, ids.data(), static_cast<int64_t>(ids.size()), 0xFF800000u, keep4);
    keep_only(row2.data(), V, ids.data(), static_cast<int64_t>(ids.size()), uint16_t{0xFC00}, keep2);
    for (int64_t t = 0; t < V; ++t) {
        const size_t u = static_cast<size_t>(t);
        CHECK_EQ(row4[u], allowed(t) ? static_cast<uint32_t>(100 + t) : 0xFF800000u);
        CHECK_EQ(row2[u], allowed(t) ? static_cast<uint16_t>(200 + t) : uint16_t{0xFC00});
    }
    // copy: from a source row, then back to the fill (an undo): only allowed entries touched
    std::vector<uint32_t> dst(V, 7u), src(V);
    for (int64_t t = 0; t < V; ++t) src[static_cast<size_t>(t)] = static_cast<uint32_t>(50 + t);
    copy_allowed_ids(dst.data(), src.data(), V, ids.data(), static_cast<int64_t>(ids.size()), 1u);
    for (int64_t t = 0; t < V; ++t)
        CHECK_EQ(dst[static_cast<size_t>(t)], allowed(t) ? static_cast<uint32_t>(50 + t) : 7u);
    copy_allowed_ids<uint32_t>(dst.data(), nullptr, V, ids.data(), static_cast<int64_t>(ids.size()), 1u);
    for (int64_t t = 0; t < V; ++t) CHECK_EQ(dst[static_cast<size_t>(t)], allowed(t) ? 1u : 7u);
}
