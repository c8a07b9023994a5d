// Fixed formats and regex entry points: int_range_dfa, nfa_determinize, regex_dfa, key_automaton.
#include <nanobind/stl/string.h>

#include <string_view>

#include "bindings/common.h"
#include "formats.h"
#include "regex.h"

namespace trierouter {

namespace {

// int_range_dfa(zero, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept): decimal bounds
nb::tuple int_range_dfa_py(Truthy zero, const std::string& pl, const std::string& ph, const std::string& nl,
                           const std::string& nh) {
    for (const std::string* s : {&pl, &ph, &nl, &nh})
        for (size_t i = 0; i < s->size(); ++i) {
            const char c = (*s)[i];
            if (c < '0' || c > '9' || (i == 0 && c == '0'))
                throw nb::value_error("int_range_dfa: a bound is not a decimal >= 1");
        }
    Dfa out;
    int_range_dfa(zero, pl.c_str(), ph.c_str(), nl.c_str(), nh.c_str(), out);
    return dfa_result(out, true);
}

// nfa_determinize(n: int, edge_src: int32[], edge_dst: int32[], edge_bytes: uint8 (E, 32),
//                 eps_src: int32[], eps_dst: int32[], start: int, final: int, max_states=0,
//                 edges=False)
//   -> :func:`dfa_result` of :func:`determinize`, or None once more than ``max_states`` (> 0)
//   DFA states are found.
nb::object nfa_determinize(int64_t n, const In1<int32_t>& es, const In1<int32_t>& ed, const Bytes& eb,
                           const In1<int32_t>& xs, const In1<int32_t>& xd, int64_t start, int64_t final,
                           int64_t max_states, Truthy edges) {
    const int64_t ne = static_cast<int64_t>(es.shape(0)), nx = static_cast<int64_t>(xs.shape(0));
    if (n <= 0 || n > (int64_t{1} << 24) || ed.shape(0) != es.shape(0) || xd.shape(0) != xs.shape(0) ||
        static_cast<int64_t>(eb.nbytes()) != ne * 32 || start < 0 || start >= n || final < 0 || final >= n)
        throw nb::value_error("nfa_determinize: bad sizes");
    for (int64_t i = 0; i < ne; ++i)
        if (es.data()[i] < 0 || es.data()[i] >= n || ed.data()[i] < 0 || ed.data()[i] >= n)
            throw nb::value_error("nfa_determinize: an edge out of range");
    for (int64_t i = 0; i < nx; ++i)
        if (xs.data()[i] < 0 || xs.data()[i] >= n || xd.data()[i] < 0 || xd.data()[i] >= n)
            throw nb::value_error("nfa_determinize: an epsilon edge out of range");
    const NfaEdges g{n, es.data(), ed.data(), xs.data(), xd.data(), static_cast<const uint8_t*>(eb.data()), ne, nx};
    Dfa dfa;
    bool fits;
    {
        nb::gil_scoped_release nogil;
        fits = determinize(g, start, final, max_states, dfa);
    }
    if (!fits) return nb::none();
    return dfa_result(dfa, edges);
}

// regex_dfa(pattern: bytes, quoted: bool, max_states: int, max_nfa: int, max_depth: int)
//   -> (src int32[], byte int32[], dst int32[], accept bool[m]): the DFA of ``pattern``'s full
//   matches (between two '"' bytes with ``quoted``), as nfa_fragment(seq(lit('"'),
//   pattern_node(pattern), lit('"'))) builds it: the same states, numbered alike; or an int:
//   0 outside the supported subset (or groups nested past ``max_depth``), 1 past ``max_states``
//   (> 0) DFA states, 2 past ``max_nfa`` NFA states. ASCII only (other text: ValueError).
nb::object regex_dfa_py(const nb::bytes& pattern, Truthy quoted, int64_t max_states, int64_t max_nfa,
                        int64_t max_depth) {
    const std::string s(pattern.c_str(), pattern.size());
    for (char ch : s)
        if (static_cast<unsigned char>(ch) >= 0x80) throw nb::value_error("regex_dfa: the pattern is not ASCII");
    if (max_nfa <= 0 || max_nfa > (int64_t{1} << 24) || max_depth < 0 || max_depth > 1000)
        throw nb::value_error("regex_dfa: max_nfa must be in 1..2**24, max_depth in 0..1000");
    Dfa dfa;
    int verdict;  // -1: built
    {
        nb::gil_scoped_release nogil;
        verdict = regex_dfa(s.data(), static_cast<int64_t>(s.size()), quoted, max_states, max_nfa, max_depth, dfa);
    }
    if (verdict >= 0) return nb::int_(verdict);
    return dfa_result(dfa, true);
}

// key_automaton(texts: list[bytes], required: bytes) -> (src, byte, dst, count, exit_states,
//   exit_keys): the key automaton of an object (slots/objects.py's _key_automaton, same states
//   in the same numbering, same edge order): texts[j] is key j's JSON text and ": ", required[j]
//   nonzero when key j is required. Exits in the reference's order: state 2 (after "}", key -1)
//   then each key's chain end (key j). The trie's children are kept in insertion order and the
//   windows' work list is a stack, as in the reference, so the numbering matches.
nb::tuple key_automaton_py(const nb::list& texts_o, const nb::bytes& required) {
    const size_t n = texts_o.size();
    if (required.size() != n || n >= (size_t{1} << 20))
        throw nb::value_error("key_automaton: one required flag per key, < 2**20 keys");
    std::vector<nb::bytes> held;
    std::vector<std::string_view> texts;
    for (size_t j = 0; j < n; ++j) {
        nb::handle o = texts_o[j];
        if (!nb::isinstance<nb::bytes>(o) || nb::borrow<nb::bytes>(o).size() == 0)
            throw nb::value_error("key_automaton: texts must be non-empty bytes");
        held.push_back(nb::borrow<nb::bytes>(o));
        texts.emplace_back(held.back().c_str(), held.back().size());
    }
    KeyAutomaton out;
    const int verdict = key_automaton(texts, required.c_str(), out);
    if (verdict == 2) throw nb::value_error("key_automaton: too many states");
    if (verdict == 1) throw std::bad_alloc();
    nb::object a = to_numpy(out.src), b = to_numpy(out.byte), c = to_numpy(out.dst);
    nb::object e = to_numpy(out.exs), f = to_numpy(out.exk);
    return nb::make_tuple(a, b, c, static_cast<int64_t>(out.count), e, f);
}

}  // namespace

void bind_formats(nb::module_& m) {
    m.def("int_range_dfa", &int_range_dfa_py, "zero"_a, "pos_lo"_a, "pos_hi"_a, "neg_lo"_a, "neg_hi"_a,
          "int_range_dfa(zero, pos_lo, pos_hi, neg_lo, neg_hi) -> (src, byte, dst, accept)");
    m.def("nfa_determinize", &nfa_determinize, "n"_a, "edge_src"_a.noconvert(), "edge_dst"_a.noconvert(),
          "edge_bytes"_a.noconvert(), "eps_src"_a.noconvert(), "eps_dst"_a.noconvert(), "start"_a, "final"_a,
          "max_states"_a = 0, "edges"_a = Truthy{},
          "nfa_determinize(n, edge_src, edge_dst, edge_bytes, eps_src, eps_dst, start, final, max_states=0, "
          "edges=False) -> (table, accept) | None");
    m.def("regex_dfa", &regex_dfa_py, "pattern"_a, "quoted"_a, "max_states"_a, "max_nfa"_a, "max_depth"_a,
          "regex_dfa(pattern: bytes, quoted, max_states, max_nfa, max_depth) -> (src, byte, dst, accept) | 0 "
          "(unsupported) | 1 (> max_states) | 2 (> max_nfa)");
    m.def("key_automaton", &key_automaton_py, "texts"_a, "required"_a,
          "key_automaton(texts, required) -> (src, byte, dst, count, exit_states, exit_keys)");
}

}  // namespace trierouter
