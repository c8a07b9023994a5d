// compact_layout(): the arrays of the compact layout (rows walked on demand dropped).
#include "bindings/common.h"
#include "compact.h"
#include "compile.h"
#include "token_trie.h"

namespace trierouter {


// compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets,
//                terminator, max_keys, trie_or_None, end_ids) -> dict of arrays
// The rows of the nodes with at most max_keys keys below are dropped (bit set in demand_bits);
// the rest, END and DEAD keep theirs. Where some byte of the keys has no single-byte token in the
// trie, the compile may have pruned tokens leading to nodes no token sequence completes: then
// each dropped row is first walked and compared with the stored one, and kept where they differ.
// trie=None skips that check (the tests show that it matters).
PyObject* py_compact_layout(PyObject*, PyObject* args) {
    PyObject *rp_o, *tk_o, *ch_o, *fp_o, *fc_o, *vb_o, *vo_o, *trie_o, *end_o;
    Py_buffer term;
    long long max_keys;
    if (!PyArg_ParseTuple(args, "OOOOOOOy*LOO", &rp_o, &tk_o, &ch_o, &fp_o, &fc_o, &vb_o, &vo_o,
                          &term, &max_keys, &trie_o, &end_o))
        return nullptr;
    std::string tstr(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    PyBuffer_Release(&term);
    if (trie_o != Py_None && !PyObject_TypeCheck(trie_o, &TokenTrieType)) {
        PyErr_SetString(PyExc_TypeError, "trie must be a TokenTrie or None");
        return nullptr;
    }
    View rp, tk, ch, fp, fc, vb, vo;
    struct Release {
        std::vector<View*> v;
        ~Release() {
            for (View* x : v)
                if (x->held) PyBuffer_Release(&x->b);
        }
    } rel{{&rp, &tk, &ch, &fp, &fc, &vb, &vo}};
    if (!get_view(rp_o, rp, 'i', 4, "row_ptr") || !get_view(tk_o, tk, 'i', 4, "tokens") ||
        !get_view(ch_o, ch, 'u', 2, "children") || !get_view(fp_o, fp, 'i', 4, "far_pos") ||
        !get_view(fc_o, fc, 'i', 4, "far_child") || !get_view(vb_o, vb, 'u', 1, "value_bytes") ||
        !get_view(vo_o, vo, 'i', 8, "value_offsets"))
        return nullptr;
    std::vector<int32_t> end_ids;
    {
        PyObject* s = PySequence_Fast(end_o, "end_ids must be a sequence of ints");
        if (!s) return nullptr;
        for (Py_ssize_t q = 0; q < PySequence_Fast_GET_SIZE(s); ++q)
            end_ids.push_back(static_cast<int32_t>(PyLong_AsLong(PySequence_Fast_GET_ITEM(s, q))));
        Py_DECREF(s);
        if (PyErr_Occurred()) return nullptr;
        std::sort(end_ids.begin(), end_ids.end());
    }
    const int32_t* row_ptr = static_cast<const int32_t*>(rp.b.buf);
    const int32_t* tokens = static_cast<const int32_t*>(tk.b.buf);
    const uint16_t* children = static_cast<const uint16_t*>(ch.b.buf);
    const int32_t* far_pos = static_cast<const int32_t*>(fp.b.buf);
    const int32_t* far_child = static_cast<const int32_t*>(fc.b.buf);
    const int64_t n_states = rp.b.len / 4 - 1, n_far = fp.b.len / 4;
    const int64_t n_nodes = n_states - 2;
    KeyView k;
    k.vb = static_cast<const uint8_t*>(vb.b.buf);
    k.voff = static_cast<const int64_t*>(vo.b.buf);
    k.K = vo.b.len / 8 - 1;
    k.term = tstr;
    if (n_nodes < 1 || k.K < 1) {
        PyErr_SetString(PyExc_ValueError, "compact_layout: a set has a root and a value");
        return nullptr;
    }
    Buf<int32_t> first, lcp;
    constexpr size_t PAGES_FROM = size_t(64) << 10;  // as the compile's compact arrays
    first.pages_from = lcp.pages_from = PAGES_FROM;
    bool ok = first.resize(static_cast<size_t>(k.K)) && lcp.resize(static_cast<size_t>(k.K));
    if (!ok) return PyErr_NoMemory();
    const int64_t words = (n_states + 63) / 64;
    Buf<uint64_t> bits;
    Buf<int32_t> rank, nrp, ntk, nfp, nfc;
    Buf<uint16_t> nch;
    bits.pages_from = rank.pages_from = nrp.pages_from = ntk.pages_from = nfp.pages_from = PAGES_FROM;
    nfc.pages_from = nch.pages_from = PAGES_FROM;
    if (!bits.assign(static_cast<size_t>(words), 0) || !rank.resize(static_cast<size_t>(words)))
        return PyErr_NoMemory();
    int64_t mismatched = 0;
    TokenTrieObject* trie_obj = trie_o == Py_None ? nullptr : reinterpret_cast<TokenTrieObject*>(trie_o);
    const TokenTrie* trie = trie_obj ? &trie_obj->trie : nullptr;
    int64_t next_first = 1;
    Py_BEGIN_ALLOW_THREADS;
    // keys: common prefix with the previous key, and the first node each adds
    for (int64_t i = 0; i < k.K; ++i) {
        const int64_t l = i ? k.common(i - 1, i) : 0;
        lcp[static_cast<size_t>(i)] = static_cast<int32_t>(l);
        first[static_cast<size_t>(i)] = static_cast<int32_t>(next_first);
        next_first += k.klen(i) - l;
    }
    k.first = first.p;
    k.lcp = lcp.p;
    ok = next_first == n_nodes;
    auto mark = [&](int64_t s) { bits[static_cast<size_t>(s >> 6)] |= uint64_t(1) << (s & 63); };
    std::vector<int32_t> from(static_cast<size_t>(k.K));
    if (ok) walked_depths(lcp.p, k.K, max_keys, from.data());
    for (int64_t i = 0; ok && i < k.K; ++i)
        for (int64_t d = from[static_cast<size_t>(i)]; d <= k.klen(i); ++d)
            mark(first[static_cast<size_t>(i)] + d - lcp[static_cast<size_t>(i)] - 1);
    if (ok && k.K <= max_keys) mark(0);
    bool verify = false;  // some byte no single token spells
    if (ok && trie) {
        uint8_t used[256] = {0};
        for (int64_t q = 0; q < k.voff[k.K]; ++q) used[k.vb[q]] = 1;
        for (char ch : k.term) used[static_cast<uint8_t>(ch)] = 1;
        for (int b = 0; b < 256; ++b) verify = verify || (used[b] && !trie->single[b]);
    }
    if (ok && verify) {
        const TT tt(trie);
        std::vector<DemandPair> row;
        for (int64_t w = 0; w < words; ++w) {
            for (uint64_t b = bits[static_cast<size_t>(w)]; b; b &= b - 1) {
                const int64_t s = (w << 6) + __builtin_ctzll(b);
                demand_row(k, tt, end_ids, static_cast<int32_t>(n_nodes), s, row);
                const int64_t lo = row_ptr[s], n = row_ptr[s + 1] - lo;
                bool same = n == static_cast<int64_t>(row.size());
                for (int64_t q = 0; same && q < n; ++q) {
                    const int64_t at = lo + q;
                    const uint16_t c = children[at];
                    int64_t target = s + c;
                    if (c == TO_END) target = n_nodes;
                    else if (c == FAR)
                        target = far_child[std::lower_bound(far_pos, far_pos + n_far,
                                                            static_cast<int32_t>(at)) - far_pos];
                    same = tokens[at] == row[static_cast<size_t>(q)].token &&
                           target == row[static_cast<size_t>(q)].target;
                }
                if (!same) {
                    bits[static_cast<size_t>(w)] &= ~(uint64_t(1) << (s & 63));
                    ++mismatched;
                }
            }
        }
    }
    // the stored rows: every state whose bit is clear, in order
    int64_t dropped = 0;
    for (int64_t w = 0; ok && w < words; ++w) {
        rank[static_cast<size_t>(w)] = static_cast<int32_t>(dropped);
        dropped += __builtin_popcountll(bits[static_cast<size_t>(w)]);
    }
    int64_t kept_pairs = 0;
    auto walked = [&](int64_t s) { return (bits[static_cast<size_t>(s >> 6)] >> (s & 63)) & 1; };
    for (int64_t s = 0; ok && s < n_states; ++s)
        if (!walked(s)) kept_pairs += row_ptr[s + 1] - row_ptr[s];
    ok = ok && nrp.resize(static_cast<size_t>(n_states - dropped + 1)) &&
         ntk.resize(static_cast<size_t>(kept_pairs)) && nch.resize(static_cast<size_t>(kept_pairs));
    int64_t f = 0, w = 0, r = 0;
    for (int64_t s = 0; ok && s < n_states; ++s) {
        if (walked(s)) continue;
        const int64_t lo = row_ptr[s], len = row_ptr[s + 1] - lo;
        nrp[static_cast<size_t>(r++)] = static_cast<int32_t>(w);
        std::memcpy(ntk.p + w, tokens + lo, static_cast<size_t>(len) * 4);
        std::memcpy(nch.p + w, children + lo, static_cast<size_t>(len) * 2);
        for (; f < n_far && far_pos[f] < lo + len; ++f)  // far children (in pair order)
            if (far_pos[f] >= lo)
                ok = ok && nfp.push(static_cast<int32_t>(w + far_pos[f] - lo)) && nfc.push(far_child[f]);
        w += len;
    }
    if (ok) nrp[static_cast<size_t>(r)] = static_cast<int32_t>(w);
    Py_END_ALLOW_THREADS;
    if (!ok) {
        if (next_first != n_nodes)
            PyErr_SetString(PyExc_ValueError, "compact_layout: the values do not make these nodes");
        else
            PyErr_NoMemory();
        return nullptr;
    }
    Buf<int64_t> info;
    if (!info.resize(3)) return PyErr_NoMemory();
    info[0] = n_nodes;
    info[1] = max_keys;
    info[2] = mismatched;
    Named out[] = {
        {"row_ptr", to_numpy(nrp, NPY_INT32)},        {"tokens", to_numpy(ntk, NPY_INT32)},
        {"children", to_numpy(nch, NPY_UINT16)},      {"far_pos", to_numpy(nfp, NPY_INT32)},
        {"far_child", to_numpy(nfc, NPY_INT32)},      {"demand_bits", to_numpy(bits, NPY_UINT64)},
        {"demand_rank", to_numpy(rank, NPY_INT32)},   {"key_first", to_numpy(first, NPY_INT32)},
        {"key_lcp", to_numpy(lcp, NPY_INT32)},        {"compact_info", to_numpy(info, NPY_INT64)},
    };
    return dict_of(out);
}


}  // namespace trierouter
