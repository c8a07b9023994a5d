// The binding layer's shared pieces (see common.h).
#include "bindings/common.h"

#include <algorithm>

namespace trierouter {

const TokenTrie& ready_trie(nb::handle h, const char* what) {
    if (!is_instance<TokenTrieObj>(h)) throw nb::type_error((std::string(what) + ": trie must be a TokenTrie").c_str());
    const TokenTrieObj* t = built_or_null<TokenTrieObj>(h);
    if (!t)
        throw std::runtime_error(std::string(what) +
                                 ": the TokenTrie is not initialised (made without a successful __init__)");
    return t->trie;
}

namespace {
struct Owned {
    void* p;
    size_t mapped;
};
}  // namespace

nb::object hand_over(void* p, size_t mapped, size_t ndim, const size_t* shape, nb::dlpack::dtype dt) {
    nb::capsule owner(new Owned{p, mapped}, [](void* o) noexcept {
        auto* x = static_cast<Owned*>(o);
        big_free(x->p, x->mapped);
        delete x;
    });
    return nb::cast(Numpy(p, ndim, shape, owner, nullptr, dt));
}

void check_dfa(const int32_t* tab, int64_t ns, int64_t nc, const In1<int32_t>& cls, const In1<int64_t>& st,
               int64_t min_state) {
    if (cls.shape(0) != 256 || nc < 0) throw nb::value_error("table must be 2-D and byte_class hold 256 entries");
    const int32_t* c = cls.data();
    for (int64_t i = 0; i < 256; ++i)
        if (c[i] < 0 || c[i] >= nc) throw nb::value_error("byte_class names a column past the table");
    const int64_t* s = st.data();
    for (size_t i = 0; i < st.shape(0); ++i)
        if (s[i] < min_state || s[i] >= ns) throw nb::value_error("states: out of range");
    for (int64_t i = 0; i < ns * nc; ++i)
        if (tab[i] >= ns) throw nb::value_error("table: a target past the last state");
}

void check_token_spans(const In1<int32_t>& ids, const In1<int64_t>& off, int64_t n_buf, const char* what) {
    const int32_t* p = ids.data();
    const int64_t* o = off.data();
    const int64_t n_off = static_cast<int64_t>(off.shape(0));
    for (size_t i = 0; i < ids.shape(0); ++i) {
        const int32_t t = p[i];
        if (t < 0 || t + 1 >= n_off || o[t] < 0 || o[t] > o[t + 1] || o[t + 1] > n_buf) throw nb::value_error(what);
    }
}

void check_csr(const In1<int64_t>& ptr, int64_t n_ids, const char* what) {
    const int64_t* p = ptr.data();
    const size_t n = ptr.shape(0);
    if (n < 1 || p[0] != 0 || p[n - 1] > n_ids) throw nb::value_error((std::string(what) + ": ptr out of range").c_str());
    for (size_t i = 1; i < n; ++i)
        if (p[i] < p[i - 1]) throw nb::value_error((std::string(what) + ": ptr not ascending").c_str());
}

nb::tuple csr_result(Buf<int64_t>& ptr, Buf<int32_t>& ids) {
    nb::object a = to_numpy(ptr);
    return nb::make_tuple(a, to_numpy(ids));
}

nb::tuple dfa_result(const Dfa& d, bool edges) {
    const size_t m = d.accept.size();
    bool* acc;
    nb::object ac = new_array<bool>({m}, &acc);
    if (m) std::memcpy(acc, d.accept.data(), m);
    if (edges) {
        nb::object a = copy_numpy(d.src.data(), d.src.size()), b = copy_numpy(d.byte.data(), d.byte.size());
        return nb::make_tuple(a, b, copy_numpy(d.dst.data(), d.dst.size()), ac);
    }
    int32_t* t;
    nb::object tab = new_array<int32_t>({m, 256}, &t);
    std::fill_n(t, m * 256, -1);
    for (size_t k = 0; k < d.src.size(); ++k) t[static_cast<size_t>(d.src[k]) * 256 + static_cast<size_t>(d.byte[k])] = d.dst[k];
    return nb::make_tuple(tab, ac);
}

Table::Table(const Bytes& a, const char* what) {
    const nb::dlpack::dtype dt = a.dtype();
    const bool is_int = dt.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) && dt.lanes == 1;
    ndim = a.ndim();
    n = static_cast<int64_t>(a.size());
    rows = ndim >= 1 ? static_cast<int64_t>(a.shape(0)) : 0;
    cols = ndim == 2 ? static_cast<int64_t>(a.shape(1)) : -1;
    if (is_int && dt.bits == 32) {
        p = static_cast<const int32_t*>(a.data());
        return;
    }
    if (!is_int || (dt.bits != 16 && dt.bits != 8))
        throw nb::type_error((std::string(what) + ": expected a contiguous int32, int16 or int8 array").c_str());
    if (dt.bits == 16)
        wide.assign(static_cast<const int16_t*>(a.data()), static_cast<const int16_t*>(a.data()) + n);
    else
        wide.assign(static_cast<const int8_t*>(a.data()), static_cast<const int8_t*>(a.data()) + n);
    p = wide.data();
}

I64Seq::I64Seq(nb::handle o, const char* what) {
    if (nb::isinstance<nb::list>(o)) {
        nb::list l = nb::borrow<nb::list>(o);
        own.resize(l.size());
        for (size_t i = 0; i < own.size(); ++i) own[i] = nb::cast<int64_t>(l[i]);
        p = own.data();
        n = static_cast<int64_t>(own.size());
        return;
    }
    if (!nb::try_cast(o, arr, false))
        throw nb::type_error((std::string(what) + ": expected a list of ints or a contiguous 1-D int64 array").c_str());
    p = arr.data();
    n = static_cast<int64_t>(arr.shape(0));
}

std::vector<int32_t> sorted_ids(nb::handle seq) {
    std::vector<int32_t> ids;
    for (nb::handle v : seq) ids.push_back(static_cast<int32_t>(nb::cast<long>(v)));
    std::sort(ids.begin(), ids.end());
    return ids;
}

void raise_run_error(const RunError& e) {
    switch (e.kind) {
        case RunError::kRange:
            throw nb::value_error((std::string("dfa_wire: ") + e.what + " out of range").c_str());
        case RunError::kAmbiguous:
            throw nb::value_error(("ambiguous continuation on byte " + std::to_string(static_cast<int>(e.byte)) +
                                   " at state " + std::to_string(static_cast<long long>(e.src)))
                                      .c_str());
        default:
            throw std::bad_alloc();
    }
}

}  // namespace trierouter
