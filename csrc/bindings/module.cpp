// The module trierouter.registry._core: its types, entry points and SOURCE_HASH, bound with
// nanobind (each binding file registers its concept's entry points).
//
// One pass from values to the step layout of a ChoiceSet (compile.h, compile_set):
//   values (str) -> UTF-8 bytes, sorted, deduplicated -> byte trie in preorder
//   -> for every node n, a walk down the trie in lockstep with a forward trie of the token bytes
//      (token_trie.h) emits every (n, token, child) with path(n) + bytes(token) == path(child):
//      the rows come out in node order, so the CSR is written as it is produced, each row sorted
//      by token id
//   -> row_ptr, tokens, children (uint16 offsets; 0xFFFF = END, 0xFFFE = far), far_pos,
//      far_child, ends, value_bytes, value_offsets: the arrays ChoiceSet saves and the numpy
//      reference builds, bit for bit.
// Steps (steps.h; Core and MatcherBase here) read those arrays through nb::ndarray views (numpy
// or DLPack), so a memory-mapped file serves as well as a freshly compiled set. Nothing is built
// lazily. The per-step methods are CPython method descriptors (fast_method.h), the rest nanobind
// functions.
//
// The algorithms (csrc/*.h, support/, shortlist/) take spans and structs and know nothing of
// Python; csrc/bindings/ alone converts arguments, releases the GIL and makes numpy arrays.
#include "bindings/common.h"

#ifndef TRIEROUTER_SOURCE_HASH
#define TRIEROUTER_SOURCE_HASH "unknown"
#endif

NB_MODULE(_core, m) {
    using namespace trierouter;
    m.doc() = "trierouter's compiled core (see trierouter.registry.core).";
    // sets cached at module level live until the interpreter goes: no report of them at exit
    // (it would reach the stderr of every CLI run)
    nb::set_leak_warnings(false);
    bind_token_trie(m);
    bind_steps(m);
    bind_matcher(m);
    bind_compile(m);
    bind_compact(m);
    bind_automata(m);
    bind_csr(m);
    bind_formats(m);
    bind_bm25(m);
    bind_bench(m);
    m.attr("SOURCE_HASH") = TRIEROUTER_SOURCE_HASH;
}
