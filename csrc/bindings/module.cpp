// The module trierouter.registry._core: its method table, types and SOURCE_HASH.
//
// One pass from values to the serving layout of a ChoiceSet (compile.h, compile_set):
//   values (str) -> UTF-8 bytes, sorted, deduplicated -> byte trie in preorder
//   -> for every node n, a walk down the trie in lockstep with a forward trie of the token bytes
//      (token_trie.h) emits every (n, token, child) with path(n) + bytes(token) == path(child):
//      the rows come out in node order, so the CSR is written as it is produced, each row sorted
//      by token id
//   -> row_ptr, tokens, children (uint16 offsets; 0xFFFF = END, 0xFFFE = far), far_pos,
//      far_child, ends, value_bytes, value_offsets: the arrays ChoiceSet saves and the numpy
//      reference builds, bit for bit.
// Serving (serving.h; Core and MatcherBase here) reads those arrays through the buffer protocol,
// so a memory-mapped file serves as well as a freshly compiled set. Nothing is built lazily.
//
// The algorithms (csrc/*.h, support/, shortlist/) take spans and structs and know nothing of
// Python; csrc/bindings/ alone parses arguments, releases the GIL and makes numpy arrays. The C
// API directly (no binding library): METH_FASTCALL keeps a call near 30 ns.
#define TRIEROUTER_IMPORT_ARRAY
#include "bindings/common.h"
#include "bindings/entry_points.h"

#ifndef TRIEROUTER_SOURCE_HASH
#define TRIEROUTER_SOURCE_HASH "unknown"
#endif

namespace trierouter {


PyMethodDef module_methods[] = {
    {"compact_layout", py_compact_layout, METH_VARARGS,
     "compact_layout(row_ptr, tokens, children, far_pos, far_child, value_bytes, value_offsets, "
     "terminator, max_keys, trie_or_None, end_ids) -> arrays of the compact layout"},
    {"compile", py_compile, METH_VARARGS,
     "compile(values, trie, terminator, end_ids, allow_end, max_keys=0, threads=1, split_min=2048) -> (arrays, unreachable)"},
    {"dfa_masks", py_dfa_masks, METH_VARARGS,
     "dfa_masks(table, byte_class, states, trie, words=0, alt_trie=None, alt=None, share=True) -> (ptr, ids), "
     "or packed rows; dfa_masks(wire, states, trie, ...) -> (table, byte_class, that)"},
    {"dfa_masks_many", py_dfa_masks_many, METH_O,
     "dfa_masks_many(calls) -> [dfa_masks(*call) for call in calls], in one release of the GIL"},
    {"dfa_list_masks", py_dfa_list_masks, METH_VARARGS,
     "dfa_list_masks(table, byte_class, states, cand, buffer, offsets) -> (ptr, ids)"},
    {"dfa_compress", py_dfa_compress, METH_VARARGS,
     "dfa_compress(src, byte, dst, n) -> (table, byte_class)"},
    {"dfa_wire", py_dfa_wire, METH_VARARGS,
     "dfa_wire(srcs, bytes, dsts, offsets, n, link_state, link_from, extra) -> (src, byte, dst)"},
    {"nfa_determinize", py_nfa_determinize, METH_VARARGS,
     "nfa_determinize(n, edge_src, edge_dst, edge_bytes, eps_src, eps_dst, start, final, max_states=0) -> (table, accept) | None"},
    {"regex_dfa", py_regex_dfa, METH_VARARGS,
     "regex_dfa(pattern: bytes, quoted, max_states, max_nfa, max_depth) -> (src, byte, dst, accept) | 0 (unsupported) | 1 (> max_states) | 2 (> max_nfa)"},
    {"walk_counts", py_walk_counts, METH_VARARGS,
     "walk_counts(table, starts, count_state, ids, buffer, offsets) -> (final, counts)"},
    {"pack_tokens", py_pack_tokens, METH_VARARGS,
     "pack_tokens(tokens) -> (buffer, offsets): the tokens' bytes concatenated, and where each starts"},
    {"join_tokens", py_join_tokens, METH_VARARGS,
     "join_tokens(tokens, selected) -> bytes: the selected tokens joined by NUL bytes"},
    {"memset_bandwidth", py_memset_bandwidth, METH_VARARGS,
     "memset_bandwidth(buffer, repeats) -> seconds"},
    {"bm25_accumulate", py_bm25_accumulate, METH_VARARGS,
     "bm25_accumulate(ptr, docs, weights, terms, coefs, out): out[docs] += weights * coef per term"},
    {"scatter_max", py_scatter_max, METH_VARARGS,
     "scatter_max(out, values, rows, owners): out[owners] = max(out[owners], values[rows])"},
    {"top_positive", py_top_positive, METH_VARARGS,
     "top_positive(scores, k) -> ids of the k best positive scores (ties: lower id), ascending"},
    // eager tool registries (branch eager)
    {"key_automaton", py_key_automaton, METH_VARARGS,
     "key_automaton(texts, required) -> (src, byte, dst, count, exit_states, exit_keys)"},
    // fixed formats and shared pieces (branch fmt)
    {"csr_extend", py_csr_extend, METH_VARARGS,
     "csr_extend(ptr, ids, states, lo, hi, pool) -> (ptr, ids): pool[lo[j]:hi[j]] appended to the list of states[j]"},
    {"csr_pack", py_csr_pack, METH_VARARGS,
     "csr_pack(ptr, ids, which, words) -> packed rows of the lists of which"},
    {"csr_split", py_csr_split, METH_VARARGS,
     "csr_split(ptr, ids, at, n, wide, drop, words) -> (where, rows, ptr, ids): a piece's lists split into packed wide rows and narrow lists less the dropped ids"},
    {"spelled_count", py_spelled_count, METH_VARARGS,
     "spelled_count(trie, allowed, limit) -> tokens spelled with the allowed bytes alone, up to limit"},
    {"int_range_dfa", py_int_range_dfa, METH_VARARGS,
     "int_range_dfa(zero, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_core",
                          "trierouter's compiled core (see trierouter.registry.core).", -1,
                          module_methods};

}  // namespace trierouter

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    trierouter::setup_tokentrie_type();
    trierouter::setup_core_type();
    trierouter::setup_matcher_type();
    if (PyType_Ready(&trierouter::TokenTrieType) < 0 || PyType_Ready(&trierouter::CoreType) < 0 ||
        PyType_Ready(&trierouter::MatcherType) < 0)
        return nullptr;
    PyObject* m = PyModule_Create(&trierouter::module_def);
    if (!m) return nullptr;
    Py_INCREF(&trierouter::TokenTrieType);
    Py_INCREF(&trierouter::CoreType);
    Py_INCREF(&trierouter::MatcherType);
    if (PyModule_AddObject(m, "TokenTrie", reinterpret_cast<PyObject*>(&trierouter::TokenTrieType)) < 0 ||
        PyModule_AddObject(m, "Core", reinterpret_cast<PyObject*>(&trierouter::CoreType)) < 0 ||
        PyModule_AddObject(m, "MatcherBase", reinterpret_cast<PyObject*>(&trierouter::MatcherType)) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", TRIEROUTER_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
