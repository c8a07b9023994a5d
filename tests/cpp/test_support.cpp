// support/ (radix sort of byte strings, common prefix), the compile's walked depths and the
// shortlist's kernels, against brute force.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "compile.h"
#include "shortlist/bm25.h"
#include "support/sort.h"

using namespace trierouter;

namespace {

std::vector<std::string> random_strings(std::mt19937& rng, size_t n, size_t max_len, int alphabet) {
    std::vector<std::string> out(n);
    for (std::string& s : out) {
        const size_t len = rng() % (max_len + 1);
        for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>(rng() % alphabet));  // NULs too
    }
    return out;
}

Str as_str(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), static_cast<int64_t>(s.size())}; }
std::string as_string(const Str& s) { return std::string(reinterpret_cast<const char*>(s.p), static_cast<size_t>(s.n)); }

// sort_values against std::stable_sort: sizes around the comparison / MSD / LSD / 16-byte
// thresholds, short and long strings, small alphabets (long shared prefixes) and NUL bytes.
void check_sort(size_t n, size_t max_len, int alphabet, bool relocate, unsigned seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> values = random_strings(rng, n, max_len, alphabet);
    std::vector<Ent> ents(n);
    for (size_t i = 0; i < n; ++i) ents[i] = {as_str(values[i]), static_cast<int32_t>(i)};
    Buf<uint8_t> buf;
    sort_values(ents.data(), n, 0, relocate ? &buf : nullptr);
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
    bool same = true;
    for (size_t i = 0; i < n && same; ++i)
        same = ents[i].id == static_cast<int32_t>(order[i]) && as_string(ents[i].s) == values[order[i]];
    CHECK(same);
}

}  // namespace

TEST(sort_values_small_and_large) {
    check_sort(0, 4, 3, false, 1);
    check_sort(1, 4, 3, false, 2);
    check_sort(50, 12, 3, false, 3);        // comparison sort
    check_sort(3000, 20, 4, false, 4);      // MSD levels
    check_sort(5000, 40, 2, true, 5);       // long shared prefixes, relocated
    check_sort(20000, 10, 256, false, 6);   // LSD passes, every byte value
    check_sort(20000, 30, 5, true, 7);      // 16-byte keys
}

TEST(sort_values_split_matches_one_sort) {
    std::mt19937 rng(11);
    const std::vector<std::string> values = random_strings(rng, 9000, 16, 256);
    std::vector<Ent> a(values.size()), b(values.size());
    for (size_t i = 0; i < values.size(); ++i) a[i] = b[i] = {as_str(values[i]), static_cast<int32_t>(i)};
    Buf<uint8_t> r1, r2, r3;
    sort_values(a.data(), a.size(), 0, &r1);
    sort_values_split(b.data(), b.size(), &r2, &r3, true);
    bool same = true;
    for (size_t i = 0; i < a.size() && same; ++i) same = a[i].id == b[i].id;
    CHECK(same);
}

TEST(common_prefix) {
    const std::string x = "get_user", y = "get_users", z = "put", e;
    CHECK_EQ(common_prefix(as_str(x), as_str(y)), 8);
    CHECK_EQ(common_prefix(as_str(y), as_str(x)), 8);
    CHECK_EQ(common_prefix(as_str(x), as_str(z)), 0);
    CHECK_EQ(common_prefix(as_str(x), as_str(e)), 0);
    const std::string n1("a\0b", 3), n2("a\0c", 3);
    CHECK_EQ(common_prefix(as_str(n1), as_str(n2)), 2);
}

// walked_depths: key i's nodes from depth out[i] on have at most max_keys keys below them; by
// brute force, the first depth past lcp[i] whose prefix at most max_keys keys share.
TEST(walked_depths_brute_force) {
    std::mt19937 rng(5);
    std::vector<std::string> keys = random_strings(rng, 400, 8, 3);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const int64_t n = static_cast<int64_t>(keys.size());
    std::vector<int32_t> lcp(static_cast<size_t>(n), 0), out(static_cast<size_t>(n));
    for (int64_t i = 1; i < n; ++i)
        lcp[static_cast<size_t>(i)] = static_cast<int32_t>(common_prefix(as_str(keys[static_cast<size_t>(i - 1)]), as_str(keys[static_cast<size_t>(i)])));
    for (int64_t max_keys : {1, 2, 5, 40}) {
        walked_depths(lcp.data(), n, max_keys, out.data());
        bool ok = true;
        for (int64_t i = 0; i < n && ok; ++i) {
            const std::string& k = keys[static_cast<size_t>(i)];
            const int64_t len = static_cast<int64_t>(k.size());
            int64_t d = lcp[static_cast<size_t>(i)] + 1;
            for (; d <= len; ++d) {
                int64_t below = 0;
                for (const std::string& o : keys)
                    below += o.size() >= static_cast<size_t>(d) && o.compare(0, static_cast<size_t>(d), k, 0, static_cast<size_t>(d)) == 0;
                if (below <= max_keys) break;
            }
            ok = d > len ? out[static_cast<size_t>(i)] > len : out[static_cast<size_t>(i)] == d;
        }
        CHECK(ok);
    }
}

TEST(bm25_kernels) {
    // two terms: postings (docs 0, 2) and (doc 1, 2)
    const int64_t ptr[] = {0, 2, 4};
    const int64_t docs[] = {0, 2, 1, 2};
    const float w[] = {1.0f, 2.0f, 3.0f, 4.0f};
    const int64_t terms[] = {1, 0};
    const double coefs[] = {0.5, 2.0};
    double out[3] = {0, 0, 0};
    CHECK_EQ(bm25_accumulate(ptr, docs, w, terms, coefs, 2, out, 3), -1);
    CHECK(out[0] == 2.0 && out[1] == 1.5 && out[2] == 2.0 + 4.0);
    CHECK_EQ(bm25_accumulate(ptr, docs, w, terms, coefs, 2, out, 2), 2);  // doc 2 out of range

    double best[2] = {-1.0, -1.0};
    const double values[] = {0.3, 0.9, 0.1};
    const int64_t rows[] = {0, 1, 2}, owners[] = {0, 0, 1};
    CHECK_EQ(scatter_max(best, 2, values, 3, rows, owners, 3), -1);
    CHECK(best[0] == 0.9 && best[1] == 0.1);

    std::mt19937 rng(9);
    std::vector<double> s(1000);
    for (double& x : s) x = static_cast<double>(static_cast<int>(rng() % 21) - 10);  // ties, negatives
    for (long long k : {0LL, 1LL, 7LL, 2000LL}) {
        std::vector<int64_t> ids;
        for (int64_t i = 0; i < 1000; ++i)
            if (s[static_cast<size_t>(i)] > 0) ids.push_back(i);
        std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)]; });
        if (static_cast<long long>(ids.size()) > k) ids.resize(static_cast<size_t>(k));
        std::sort(ids.begin(), ids.end());
        CHECK(top_positive(s.data(), 1000, k) == ids);
    }
}
