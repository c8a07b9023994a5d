// compact_layout(): the arrays of the compact layout (rows walked on demand dropped).
#include "bindings/common.h"
#include "compact.h"
#include "compile.h"
#include "steps.h"
#include "token_trie.h"

namespace trierouter {

namespace {

// compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets,
//                terminator, max_keys, trie_or_None, end_ids) -> dict of arrays
// The rows of the nodes with at most max_keys keys below are dropped (bit set in demand_bits);
// the rest, END and DEAD keep theirs. Where some byte of the keys has no single-byte token in the
// trie, the compile may have pruned tokens leading to nodes no token sequence completes: then
// each dropped row is first walked and compared with the stored one, and kept where they differ.
// trie=None skips that check (the tests show that it matters).
nb::dict compact_layout_py(const In1<int32_t>& rp, const In1<int32_t>& tk, const In1<uint16_t>& ch,
                           const In1<int32_t>& fp, const In1<int32_t>& fc, const In1<uint8_t>& vb,
                           const In1<int64_t>& vo, const nb::bytes& terminator, int64_t max_keys, nb::handle trie,
                           nb::handle end_ids) {
    if (!trie.is_none() && !is_instance<TokenTrieObj>(trie)) throw nb::type_error("trie must be a TokenTrie or None");
    const std::vector<int32_t> ends = sorted_ids(end_ids);
    const int64_t n_states = static_cast<int64_t>(rp.shape(0)) - 1, n_far = static_cast<int64_t>(fp.shape(0));
    const int64_t n_nodes = n_states - 2;
    KeyView k;
    k.vb = vb.data();
    k.voff = vo.data();
    k.K = static_cast<int64_t>(vo.shape(0)) - 1;
    k.term.assign(terminator.c_str(), terminator.size());
    if (n_nodes < 1 || k.K < 1) throw nb::value_error("compact_layout: a set has a root and a value");
    // the arrays it indexes with, checked as a Core checks them (ids: any int32 >= 0), and the
    // values' offsets
    const Serving arrays{rp.data(), tk.data(), ch.data(), fp.data(), fc.data(), nullptr, n_far, 0, n_states,
                         static_cast<int64_t>(tk.shape(0)), n_nodes, n_nodes + 1, INT32_MAX, 0, nullptr};
    if (ch.shape(0) != tk.shape(0) || static_cast<int64_t>(fc.shape(0)) != n_far)
        throw nb::value_error("compact_layout: children and far_child must match tokens and far_pos");
    std::string why;
    if (check_serving(&arrays, n_states, &why)) throw nb::value_error(("compact_layout: " + why).c_str());
    for (int64_t i = 0; i <= k.K; ++i)
        if (k.voff[i] < (i ? k.voff[i - 1] : 0) || (i == 0 && k.voff[0] != 0) ||
            k.voff[i] > static_cast<int64_t>(vb.shape(0)))
            throw nb::value_error(("compact_layout: value_offsets[" + std::to_string(i) + "] = " +
                                   std::to_string(k.voff[i]) + " out of range")
                                      .c_str());
    const TokenTrie* tri = trie.is_none() ? nullptr : &ready_trie(trie, "compact_layout");
    const CompactInput in{rp.data(), tk.data(), ch.data(), fp.data(), fc.data(), n_states, n_far, k, tri, ends, max_keys};
    CompactLayout lay;
    CompactStatus status;
    {
        nb::gil_scoped_release nogil;
        try {
            status = compact_layout(in, lay);
        } catch (const std::bad_alloc&) {
            status = CompactStatus::kNoMemory;
        }
    }
    if (status == CompactStatus::kBadNodes) throw nb::value_error("compact_layout: the values do not make these nodes");
    if (status != CompactStatus::kOk) throw std::bad_alloc();
    Buf<int64_t> info;
    if (!info.resize(3)) throw std::bad_alloc();
    info[0] = n_nodes;
    info[1] = max_keys;
    info[2] = lay.mismatched;
    nb::dict out;
    out["row_ptr"] = to_numpy(lay.row_ptr);
    out["tokens"] = to_numpy(lay.tokens);
    out["children"] = to_numpy(lay.children);
    out["far_pos"] = to_numpy(lay.far_pos);
    out["far_child"] = to_numpy(lay.far_child);
    out["demand_bits"] = to_numpy(lay.bits);
    out["demand_rank"] = to_numpy(lay.rank);
    out["key_first"] = to_numpy(lay.first);
    out["key_lcp"] = to_numpy(lay.lcp);
    out["compact_info"] = to_numpy(info);
    return out;
}

}  // namespace

void bind_compact(nb::module_& m) {
    m.def("compact_layout", &compact_layout_py, "row_ptr"_a.noconvert(), "tokens"_a.noconvert(),
          "children"_a.noconvert(), "far_pos"_a.noconvert(), "far_child"_a.noconvert(), "value_bytes"_a.noconvert(),
          "value_offsets"_a.noconvert(), "terminator"_a, "max_keys"_a, "trie"_a.none(), "end_ids"_a,
          "compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets, terminator, "
          "max_keys, trie_or_None, end_ids) -> arrays of the compact layout");
}

}  // namespace trierouter
