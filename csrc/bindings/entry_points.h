// The module's entry points, each defined in the binding file of its concept, and the setup of
// its three types.
#pragma once

#include "bindings/common.h"

namespace trierouter {

PyObject* py_bm25_accumulate(PyObject*, PyObject* args);
PyObject* py_compact_layout(PyObject*, PyObject* args);
PyObject* py_compile(PyObject*, PyObject* args);
PyObject* py_csr_extend(PyObject*, PyObject* args);
PyObject* py_csr_pack(PyObject*, PyObject* args);
PyObject* py_csr_split(PyObject*, PyObject* args);
PyObject* py_dfa_compress(PyObject*, PyObject* args);
PyObject* py_dfa_list_masks(PyObject*, PyObject* args);
PyObject* py_dfa_masks(PyObject*, PyObject* args);
PyObject* py_dfa_wire(PyObject*, PyObject* args);
PyObject* py_int_range_dfa(PyObject*, PyObject* args);
PyObject* py_join_tokens(PyObject*, PyObject* args);
PyObject* py_key_automaton(PyObject*, PyObject* args);
PyObject* py_memset_bandwidth(PyObject*, PyObject* args);
PyObject* py_nfa_determinize(PyObject*, PyObject* args);
PyObject* py_pack_tokens(PyObject*, PyObject* args);
PyObject* py_regex_dfa(PyObject*, PyObject* args);
PyObject* py_scatter_max(PyObject*, PyObject* args);
PyObject* py_spelled_count(PyObject*, PyObject* args);
PyObject* py_top_positive(PyObject*, PyObject* args);
PyObject* py_walk_counts(PyObject*, PyObject* args);
PyObject* py_dfa_masks_many(PyObject*, PyObject* arg);

void setup_tokentrie_type();
void setup_core_type();
void setup_matcher_type();

}  // namespace trierouter
