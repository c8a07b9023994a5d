// The set compile (compile_set) on a toy vocabulary: every row of the serving layout against
// the definition, allowed(node) = tokens t with path(node) + bytes(t) a prefix of some value,
// plus the end ids where a value is complete; one thread and several chunks alike.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "compile.h"
#include "token_trie.h"
#include "toy.h"

using namespace trierouter;

namespace {

const std::vector<std::string> kVocab = {"a", "b", "c", "ab", "bc", "ca", "abc", "ab", "cab"};
constexpr int32_t kEnd = 20;  // an end id past the vocabulary

// (token -> child) rows of every node of the set's trie, decoded from the serving layout.
std::vector<std::map<int32_t, int32_t>> compiled_rows(const std::vector<std::string>& values, const TokenTrie& trie,
                                                      long long threads, int32_t* n_nodes) {
    CompileOutput o;
    CHECK(toy::compile(values, trie, kEnd, threads, o) == CompileStatus::kOk);
    const int32_t n = static_cast<int32_t>(o.row_ptr.size()) - 3;  // n nodes, END, DEAD, + 1
    *n_nodes = n;
    std::vector<std::map<int32_t, int32_t>> rows(static_cast<size_t>(n));
    for (int32_t v = 0; v < n; ++v)
        for (int32_t j = o.row_ptr[static_cast<size_t>(v)]; j < o.row_ptr[static_cast<size_t>(v) + 1]; ++j) {
            const uint16_t code = o.children[static_cast<size_t>(j)];
            int32_t child = code == TO_END ? -1 : v + code;
            if (code == FAR)
                for (size_t f = 0; f < o.far_pos.size(); ++f)
                    if (o.far_pos[f] == j) child = o.far_child[f];
            rows[static_cast<size_t>(v)][o.tokens[static_cast<size_t>(j)]] = child;
        }
    return rows;
}

}  // namespace

TEST(compile_set_rows_by_definition) {
    TokenTrie trie{};
    toy::build_trie(trie, kVocab);
    const std::vector<std::string> values = {"cab", "abc", "ab", "b", "ca", "abc", "bcab", "cc"};
    // the set's trie: its nodes are the distinct prefixes in lexicographic order (preorder)
    std::set<std::string> prefixes;
    for (const std::string& v : values)
        for (size_t l = 0; l <= v.size(); ++l) prefixes.insert(v.substr(0, l));
    const std::vector<std::string> nodes(prefixes.begin(), prefixes.end());
    const std::set<std::string> complete(values.begin(), values.end());
    for (long long threads : {1LL, 3LL}) {
        int32_t n = 0;
        const auto rows = compiled_rows(values, trie, threads, &n);
        CHECK_EQ(n, static_cast<int32_t>(nodes.size()));
        int wrong = 0;
        for (size_t v = 0; v < nodes.size() && v < rows.size(); ++v) {
            std::map<int32_t, int32_t> want;
            for (size_t t = 0; t < kVocab.size(); ++t) {
                const std::string next = nodes[v] + kVocab[t];
                if (prefixes.count(next))
                    want[static_cast<int32_t>(t)] = static_cast<int32_t>(std::lower_bound(nodes.begin(), nodes.end(), next) - nodes.begin());
            }
            if (complete.count(nodes[v])) want[kEnd] = -1;
            wrong += rows[v] != want;
        }
        CHECK_EQ(wrong, 0);
    }
    destroy_token_trie(trie);
}
