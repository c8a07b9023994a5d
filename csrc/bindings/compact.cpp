// compact_layout(): the arrays of the compact layout (rows walked on demand dropped).
#include "bindings/common.h"
#include "compact.h"
#include "compile.h"
#include "serving.h"
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
    // the arrays it indexes with, checked as a Core checks them (ids: any int32 >= 0), and the
    // values' offsets
    const Serving arrays{row_ptr, tokens, children, far_pos, far_child, nullptr, n_far, 0, n_states,
                         tk.b.len / 4, n_nodes, n_nodes + 1, INT32_MAX, 0, nullptr};
    std::string why;
    if (ch.b.len / 2 != tk.b.len / 4 || fc.b.len / 4 != n_far) {
        PyErr_SetString(PyExc_ValueError, "compact_layout: children and far_child must match tokens and far_pos");
        return nullptr;
    }
    if (check_serving(&arrays, n_states, &why)) {
        PyErr_Format(PyExc_ValueError, "compact_layout: %s", why.c_str());
        return nullptr;
    }
    for (int64_t i = 0; i <= k.K; ++i)
        if (k.voff[i] < (i ? k.voff[i - 1] : 0) || (i == 0 && k.voff[0] != 0) || k.voff[i] > vb.b.len) {
            PyErr_Format(PyExc_ValueError, "compact_layout: value_offsets[%lld] = %lld out of range",
                         static_cast<long long>(i), static_cast<long long>(k.voff[i]));
            return nullptr;
        }
    TokenTrieObject* trie_obj = trie_o == Py_None ? nullptr : reinterpret_cast<TokenTrieObject*>(trie_o);
    if (trie_obj && !trie_ready(trie_obj, "compact_layout")) return nullptr;
    const CompactInput in{row_ptr, tokens, children, far_pos, far_child, n_states, n_far, k,
                          trie_obj ? &trie_obj->trie : nullptr, end_ids, max_keys};
    CompactLayout lay;
    CompactStatus status;
    Py_BEGIN_ALLOW_THREADS;
    try {
        status = compact_layout(in, lay);
    } catch (const std::bad_alloc&) {
        status = CompactStatus::kNoMemory;
    }
    Py_END_ALLOW_THREADS;
    if (status == CompactStatus::kBadNodes) {
        PyErr_SetString(PyExc_ValueError, "compact_layout: the values do not make these nodes");
        return nullptr;
    }
    if (status != CompactStatus::kOk) return PyErr_NoMemory();
    Buf<int32_t>&first = lay.first, &lcp = lay.lcp, &rank = lay.rank, &nrp = lay.row_ptr, &ntk = lay.tokens,
                 &nfp = lay.far_pos, &nfc = lay.far_child;
    Buf<uint64_t>& bits = lay.bits;
    Buf<uint16_t>& nch = lay.children;
    const int64_t mismatched = lay.mismatched;
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
