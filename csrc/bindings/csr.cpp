// CSR lists of fixed formats and shared pieces: csr_extend, csr_pack, csr_split.
#include "bindings/common.h"

namespace trierouter {

namespace {

// csr_extend(ptr: int64[n + 1], ids: int32[], states: int64[m], lo: int64[m], hi: int64[m],
//   pool: int32[]) -> (ptr, ids): the lists ids[ptr[s]:ptr[s + 1]], each followed by
//   pool[lo[j]:hi[j]] for every j with states[j] == s (in order of j); no sorting.
nb::tuple csr_extend(const In1<int64_t>& ptr_a, const In1<int32_t>& ids_a, const In1<int64_t>& st_a,
                     const In1<int64_t>& lo_a, const In1<int64_t>& hi_a, const In1<int32_t>& pool_a) {
    check_csr(ptr_a, static_cast<int64_t>(ids_a.shape(0)), "csr_extend");
    const int64_t *ptr = ptr_a.data(), *st = st_a.data(), *lo = lo_a.data(), *hi = hi_a.data();
    const int32_t *ids = ids_a.data(), *pool = pool_a.data();
    const int64_t n = static_cast<int64_t>(ptr_a.shape(0)) - 1, m = static_cast<int64_t>(st_a.shape(0));
    if (lo_a.shape(0) != st_a.shape(0) || hi_a.shape(0) != st_a.shape(0))
        throw nb::value_error("csr_extend: states, lo and hi differ in length");
    for (int64_t j = 0; j < m; ++j)
        if (st[j] < 0 || st[j] >= n || lo[j] < 0 || lo[j] > hi[j] || hi[j] > static_cast<int64_t>(pool_a.shape(0)))
            throw nb::value_error("csr_extend: a state or span out of range");
    Buf<int64_t> out_ptr;
    Buf<int32_t> out;
    std::vector<int64_t> add(static_cast<size_t>(n) + 1, 0), at(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < m; ++j) add[static_cast<size_t>(st[j])] += hi[j] - lo[j];
    if (!out_ptr.resize(static_cast<size_t>(n) + 1)) throw std::bad_alloc();
    out_ptr[0] = 0;
    for (int64_t s = 0; s < n; ++s)
        out_ptr[static_cast<size_t>(s) + 1] =
            out_ptr[static_cast<size_t>(s)] + (ptr[s + 1] - ptr[s]) + add[static_cast<size_t>(s)];
    if (!out.resize(static_cast<size_t>(out_ptr[static_cast<size_t>(n)]) + 1)) throw std::bad_alloc();
    out.n -= 1;
    for (int64_t s = 0; s < n; ++s) {
        const int64_t k = ptr[s + 1] - ptr[s];
        if (k) std::memcpy(out.p + out_ptr[static_cast<size_t>(s)], ids + ptr[s], static_cast<size_t>(k) * 4);
        at[static_cast<size_t>(s)] = out_ptr[static_cast<size_t>(s)] + k;
    }
    for (int64_t j = 0; j < m; ++j) {
        const int64_t k = hi[j] - lo[j];
        int64_t& a = at[static_cast<size_t>(st[j])];
        if (k) std::memcpy(out.p + a, pool + lo[j], static_cast<size_t>(k) * 4);
        a += k;
    }
    return csr_result(out_ptr, out);
}

// csr_pack(ptr: int64[n + 1], ids: int32[], which: int64[m], words: int) -> int32 (m, words):
//   row j packs the list of entry which[j] (bit t of a row = id t, XGrammar's layout).
nb::object csr_pack(const In1<int64_t>& ptr_a, const In1<int32_t>& ids_a, const In1<int64_t>& wh_a, int64_t words) {
    check_csr(ptr_a, static_cast<int64_t>(ids_a.shape(0)), "csr_pack");
    if (words < 0) throw nb::value_error("csr_pack: words must be >= 0");
    const int64_t *ptr = ptr_a.data(), *wh = wh_a.data();
    const int32_t* ids = ids_a.data();
    const int64_t m = static_cast<int64_t>(wh_a.shape(0)), n = static_cast<int64_t>(ptr_a.shape(0)) - 1;
    for (int64_t j = 0; j < m; ++j) {
        if (wh[j] < 0 || wh[j] >= n) throw nb::value_error("csr_pack: which out of range");
        for (int64_t k = ptr[wh[j]]; k < ptr[wh[j] + 1]; ++k)
            if (ids[k] < 0 || static_cast<int64_t>(ids[k]) >= words * 32) throw nb::value_error("csr_pack: an id past the row");
    }
    int32_t* rows_i;
    nb::object rows_o = new_array<int32_t>({static_cast<size_t>(m), static_cast<size_t>(words)}, &rows_i, true);
    uint32_t* rows = reinterpret_cast<uint32_t*>(rows_i);
    for (int64_t j = 0; j < m; ++j) {
        uint32_t* r = rows + static_cast<size_t>(j) * static_cast<size_t>(words);
        for (int64_t k = ptr[wh[j]]; k < ptr[wh[j] + 1]; ++k)
            r[static_cast<uint32_t>(ids[k]) >> 5] |= uint32_t{1} << (ids[k] & 31);
    }
    return rows_o;
}

// csr_split(ptr: int64[m + 1], ids: int32[], at: int64[m], n: int, wide: int, drop: bytes-like
//   (one flag per id), words: int) -> (where int32[n], rows int32 (w, words), lptr int64[n + 1],
//   lids int32[]): a shared piece's standalone masks (list j: local state at[j], ascending) split
//   in one pass: each list of ``wide`` ids or more packed into the next row (where[at[j]] = its
//   row, -1 elsewhere), every other list kept at its state without the ids flagged in ``drop``
//   (the quote tokens, walked per tool); what pieces.rows did with some twenty numpy calls.
nb::tuple csr_split(const In1<int64_t>& ptr_a, const In1<int32_t>& ids_a, const In1<int64_t>& at_a, int64_t n,
                    int64_t wide, const Bytes& drop_a, int64_t words) {
    check_csr(ptr_a, static_cast<int64_t>(ids_a.shape(0)), "csr_split");
    const int64_t *ptr = ptr_a.data(), *at = at_a.data();
    const int32_t* ids = ids_a.data();
    const uint8_t* drop = static_cast<const uint8_t*>(drop_a.data());
    const int64_t n_at = static_cast<int64_t>(at_a.shape(0)), n_ids = static_cast<int64_t>(ids_a.shape(0));
    const int64_t n_drop = static_cast<int64_t>(drop_a.nbytes());
    if (n_at != static_cast<int64_t>(ptr_a.shape(0)) - 1 || n < 0 || words < 0)
        throw nb::value_error("csr_split: at must have one state per list, n and words >= 0");
    for (int64_t j = 0; j < n_at; ++j)
        if (at[j] < 0 || at[j] >= n || (j > 0 && at[j] <= at[j - 1]))
            throw nb::value_error("csr_split: at must be ascending states below n");
    for (int64_t k = 0; k < n_ids; ++k)
        if (ids[k] < 0 || ids[k] >= n_drop || static_cast<int64_t>(ids[k]) >= words * 32)
            throw nb::value_error("csr_split: an id past drop or the row");
    int32_t* where;
    nb::object where_o = new_array<int32_t>({static_cast<size_t>(n)}, &where);
    std::fill(where, where + n, -1);
    int32_t n_wide = 0;
    for (int64_t j = 0; j < n_at; ++j)
        if (ptr[j + 1] - ptr[j] >= wide) where[at[j]] = n_wide++;
    int32_t* rows_i;
    nb::object rows_o = new_array<int32_t>({static_cast<size_t>(n_wide), static_cast<size_t>(words)}, &rows_i, true);
    uint32_t* rows = reinterpret_cast<uint32_t*>(rows_i);
    Buf<int64_t> lptr;
    Buf<int32_t> lids;
    if (!lptr.resize(static_cast<size_t>(n) + 1)) throw std::bad_alloc();
    std::fill(lptr.p, lptr.p + n + 1, 0);
    bool ok = true;
    int64_t s = 0;  // the next local state whose lptr entry is to be written
    for (int64_t j = 0; j < n_at && ok; ++j) {
        for (; s <= at[j]; ++s) lptr[static_cast<size_t>(s)] = static_cast<int64_t>(lids.n);
        const int32_t r = where[at[j]];
        if (r >= 0) {
            uint32_t* row = rows + static_cast<size_t>(r) * static_cast<size_t>(words);
            for (int64_t k = ptr[j]; k < ptr[j + 1]; ++k) row[static_cast<uint32_t>(ids[k]) >> 5] |= uint32_t{1} << (ids[k] & 31);
        } else {
            for (int64_t k = ptr[j]; k < ptr[j + 1] && ok; ++k)
                if (!drop[ids[k]]) ok = lids.push(ids[k]);
        }
    }
    for (; ok && s <= n; ++s) lptr[static_cast<size_t>(s)] = static_cast<int64_t>(lids.n);
    if (!ok) throw std::bad_alloc();
    nb::object a = to_numpy(lptr);
    return nb::make_tuple(where_o, rows_o, a, to_numpy(lids));
}

}  // namespace

void bind_csr(nb::module_& m) {
    m.def("csr_extend", &csr_extend, "ptr"_a.noconvert(), "ids"_a.noconvert(), "states"_a.noconvert(),
          "lo"_a.noconvert(), "hi"_a.noconvert(), "pool"_a.noconvert(),
          "csr_extend(ptr, ids, states, lo, hi, pool) -> (ptr, ids): pool[lo[j]:hi[j]] appended to the list of "
          "states[j]");
    m.def("csr_pack", &csr_pack, "ptr"_a.noconvert(), "ids"_a.noconvert(), "which"_a.noconvert(), "words"_a,
          "csr_pack(ptr, ids, which, words) -> packed rows of the lists of which");
    m.def("csr_split", &csr_split, "ptr"_a.noconvert(), "ids"_a.noconvert(), "at"_a.noconvert(), "n"_a, "wide"_a,
          "drop"_a.noconvert(), "words"_a,
          "csr_split(ptr, ids, at, n, wide, drop, words) -> (where, rows, ptr, ids): a piece's lists split into "
          "packed wide rows and narrow lists less the dropped ids");
}

}  // namespace trierouter
