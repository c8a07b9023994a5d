// The shortlist's BM25 kernels (bm25_accumulate, scatter_max, top_positive): argument checks here,
// loops in shortlist/bm25.cpp.
#include "bindings/common.h"
#include "shortlist/bm25.h"

namespace trierouter {

namespace {

// bm25_accumulate(ptr, docs, weights, terms, coefs, out) -> None: for each query term i (in
// order), out[docs[j]] += double(weights[j]) * coefs[i] over the term's postings
// j in [ptr[terms[i]], ptr[terms[i] + 1]). The numpy reference (BM25Index.scores) gathers the
// same products in the same order and sums them with one bincount: identical float64 sums.
void bm25_accumulate_py(const In1<int64_t>& ptr, const In1<int64_t>& docs, const In1<float>& weights,
                        const In1<int64_t>& terms, const In1<double>& coefs, const Writable1<double>& out) {
    if (weights.shape(0) != docs.shape(0)) throw nb::type_error("weights: expected float32, one per doc");
    if (coefs.shape(0) != terms.shape(0)) throw nb::type_error("coefs: expected float64, one per term");
    const int64_t n_terms = static_cast<int64_t>(ptr.shape(0)) - 1, n_out = static_cast<int64_t>(out.shape(0));
    const int64_t n_docs = static_cast<int64_t>(docs.shape(0));
    const int64_t* p = ptr.data();
    for (size_t i = 0; i < terms.shape(0); ++i) {
        const int64_t t = terms.data()[i];
        if (t < 0 || t >= n_terms || p[t] < 0 || p[t] > p[t + 1] || p[t + 1] > n_docs)
            throw nb::index_error(("term " + std::to_string(t) + ": out of range or bad postings").c_str());
    }
    const int64_t bad = bm25_accumulate(p, docs.data(), weights.data(), terms.data(), coefs.data(),
                                        static_cast<int64_t>(terms.shape(0)), out.data(), n_out);
    if (bad >= 0)
        throw nb::index_error(("doc " + std::to_string(bad) + " out of range for " + std::to_string(n_out) + " rows").c_str());
}

// scatter_max(out, values, rows, owners) -> None: out[owners[j]] = max(out[owners[j]],
// values[rows[j]]) for every j (a value's best row: numpy's maximum.at, without its per-item
// dispatch).
void scatter_max_py(const Writable1<double>& out, const In1<double>& values, const In1<int64_t>& rows,
                    const In1<int64_t>& owners) {
    if (rows.shape(0) != owners.shape(0)) throw nb::value_error("rows and owners differ in length");
    const int64_t j = scatter_max(out.data(), out.shape(0), values.data(), values.shape(0), rows.data(), owners.data(),
                                  static_cast<int64_t>(rows.shape(0)));
    if (j >= 0)
        throw nb::index_error(("scatter_max: row " + std::to_string(rows.data()[j]) + " or owner " +
                               std::to_string(owners.data()[j]) + " out of range")
                                  .c_str());
}

// top_positive(scores, k) -> int64 array: the ids of the (up to) k best positive scores, best
// by (-score, id), returned in ascending id order.
nb::object top_positive_py(const In1<double>& scores, int64_t k) {
    if (k < 0) throw nb::value_error("k must be >= 0");
    const std::vector<int64_t> hit = top_positive(scores.data(), k ? static_cast<int64_t>(scores.shape(0)) : 0, k);
    return copy_numpy(hit.data(), hit.size());
}

}  // namespace

void bind_bm25(nb::module_& m) {
    m.def("bm25_accumulate", &bm25_accumulate_py, "ptr"_a.noconvert(), "docs"_a.noconvert(), "weights"_a.noconvert(),
          "terms"_a.noconvert(), "coefs"_a.noconvert(), "out"_a.noconvert(),
          "bm25_accumulate(ptr, docs, weights, terms, coefs, out): out[docs] += weights * coef per term");
    m.def("scatter_max", &scatter_max_py, "out"_a.noconvert(), "values"_a.noconvert(), "rows"_a.noconvert(),
          "owners"_a.noconvert(), "scatter_max(out, values, rows, owners): out[owners] = max(out[owners], values[rows])");
    m.def("top_positive", &top_positive_py, "scores"_a.noconvert(), "k"_a,
          "top_positive(scores, k) -> ids of the k best positive scores (ties: lower id), ascending");
}

}  // namespace trierouter
