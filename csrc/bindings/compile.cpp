// compile(): values to the arrays of a ChoiceSet. Here: the arguments read (the values' UTF-8
// bytes joined into one buffer), compile_set (compile.cpp) run with the GIL released, its arrays
// handed to numpy.
#include "bindings/common.h"
#include "compile.h"
#include "support/sort.h"
#include "support/threads.h"
#include "token_trie.h"

namespace trierouter {

namespace {

// compile(values, trie, terminator, end_ids, allow_end, max_keys=0, threads=1, split_min=SPLIT_MIN)
//   -> (arrays: dict[str, ndarray], unreachable: list[int] | None)
// On a value that is not a str or not encodable, raises TypeError / UnicodeEncodeError (the
// Python caller turns them into the documented errors). threads > 1: the trie pass and the rows'
// pass run in up to that many chunks of at least split_min values each (the same arrays).
// max_keys > 0: the compact layout (see compact_layout), where no row is pruned.
nb::tuple compile(nb::handle values, nb::handle trie, const nb::bytes& terminator, nb::handle end_ids,
                  Truthy allow_end, int64_t max_keys, int64_t threads, int64_t split_min) {
    Lap lap;
    const std::string termb(terminator.c_str(), terminator.size());
    const TokenTrie* tri = &ready_trie(trie, "compile");
    std::vector<int32_t> eos = sorted_ids(end_ids);
    eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
    // a tuple of our own: the str objects stay alive while the GIL is released below
    const nb::tuple seq = nb::tuple(nb::borrow(values));
    const size_t k = seq.size();
    Buf<Str> strs;
    Buf<uint8_t> joined;  // the values (+ terminator) in one buffer
    // temporaries from 1 MB are mapped apart and returned when freed: from malloc's heap they
    // would stay in the process's RSS after the compile
    strs.huge_min = joined.huge_min = BIG_VEC_MIN;
    if (!strs.resize(k)) throw std::bad_alloc();
    const int64_t tl = static_cast<int64_t>(termb.size());
    for (size_t i = 0; i < k; ++i) {
        nb::handle o = seq[i];
        if (!nb::isinstance<nb::str>(o)) throw nb::type_error(("values[" + std::to_string(i) + "] is not a str").c_str());
        Py_ssize_t len;
        const char* p = PyUnicode_AsUTF8AndSize(o.ptr(), &len);  // UnicodeEncodeError (a lone surrogate)
        if (!p) throw nb::python_error();
        strs[i] = {reinterpret_cast<const uint8_t*>(p), len};
    }
    {
        // one contiguous copy (values + terminator) in input order: the sort and the trie then
        // read one buffer instead of objects spread over the heap
        size_t total = 0;
        for (auto& s : strs) total += static_cast<size_t>(s.n + tl);
        if (!joined.resize(total + 1)) throw std::bad_alloc();
        size_t at = 0;
        for (auto& s : strs) {
            if (s.n) std::memcpy(joined.data() + at, s.p, static_cast<size_t>(s.n));
            if (tl) std::memcpy(joined.data() + at + s.n, termb.data(), static_cast<size_t>(tl));
            s = {joined.data() + at, s.n + tl};
            at += static_cast<size_t>(s.n);
        }
    }
    lap.mark("collect");
    CompileOutput o;
    CompileStatus status;
    {
        nb::gil_scoped_release nogil;
        CompileInput in{strs, joined, tri, tl, eos, allow_end, max_keys, threads, split_min};
        status = compile_set(in, o, lap);
    }
    switch (status) {
        case CompileStatus::kNoMemory:
            throw std::bad_alloc();
        case CompileStatus::kTooManyNodes:
            throw std::overflow_error(
                "more than 2**31 trie nodes: node ids would overflow int32; split the set into smaller ones");
        case CompileStatus::kTooManyPairs:
            throw std::overflow_error("more than 2**31 (state, token) pairs: split the set");
        default:
            break;
    }
    nb::dict arrays;
    if (status == CompileStatus::kUnreachable) {
        nb::list bad;
        for (int64_t b : o.bad) bad.append(b);
        arrays["value_bytes"] = to_numpy(o.vbytes);
        arrays["value_offsets"] = to_numpy(o.voff);
        return nb::make_tuple(arrays, bad);
    }
    arrays["row_ptr"] = to_numpy(o.row_ptr);
    arrays["tokens"] = to_numpy(o.tokens);
    arrays["children"] = to_numpy(o.children);
    arrays["far_pos"] = to_numpy(o.far_pos);
    arrays["far_child"] = to_numpy(o.far_child);
    arrays["ends"] = to_numpy(o.ends);
    arrays["value_bytes"] = to_numpy(o.vbytes);
    arrays["value_offsets"] = to_numpy(o.voff);
    if (o.info.n) {
        arrays["demand_bits"] = to_numpy(o.dbits);
        arrays["demand_rank"] = to_numpy(o.drank);
        arrays["key_first"] = to_numpy(o.kfirst);
        arrays["key_lcp"] = to_numpy(o.lcps);
        arrays["compact_info"] = to_numpy(o.info);
    }
    lap.mark("out");
    return nb::make_tuple(arrays, nb::none());
}

}  // namespace

void bind_compile(nb::module_& m) {
    m.def("compile", &compile, "values"_a, "trie"_a, "terminator"_a, "end_ids"_a, "allow_end"_a, "max_keys"_a = 0,
          "threads"_a = 1, "split_min"_a = static_cast<int64_t>(SPLIT_MIN),
          "compile(values, trie, terminator, end_ids, allow_end, max_keys=0, threads=1, split_min=2048) -> "
          "(arrays, unreachable)");
}

}  // namespace trierouter
