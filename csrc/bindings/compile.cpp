// compile(): values to the serving arrays of a ChoiceSet. Here: the arguments read (the values'
// UTF-8 bytes joined into one buffer), compile_set (compile.cpp) run with the GIL released, its
// arrays handed to numpy.
#include "bindings/common.h"
#include "compile.h"
#include "support/sort.h"
#include "support/threads.h"
#include "token_trie.h"

namespace trierouter {

// compile(values, trie, terminator: bytes, end_ids: tuple[int], allow_end: bool, max_keys=0,
//         threads=1, split_min=SPLIT_MIN)
//   -> (arrays: dict[str, ndarray], unreachable: list[int] | None)
// On a value that is not a str or not encodable, raises TypeError / UnicodeEncodeError (the
// Python caller turns them into the documented errors). threads > 1: the trie pass and the rows'
// pass run in up to that many chunks of at least split_min values each (the same arrays).
PyObject* py_compile(PyObject*, PyObject* args) {
    Lap lap;
    PyObject* values;
    TokenTrieObject* tri_o;
    Py_buffer term;
    PyObject* end_ids;
    int allow_end;
    long long max_keys = 0;  // > 0: the compact layout (see compact_layout), where no row is pruned
    long long threads = 1, split_min = SPLIT_MIN;  // chunks of >= split_min values, one a thread
    if (!PyArg_ParseTuple(args, "OO!y*Op|LLL", &values, &TokenTrieType, &tri_o, &term, &end_ids,
                          &allow_end, &max_keys, &threads, &split_min))
        return nullptr;
    std::string termb(static_cast<const char*>(term.buf), static_cast<size_t>(term.len));
    const TokenTrie* tri = &tri_o->trie;
    PyBuffer_Release(&term);
    if (!trie_ready(tri_o, "compile")) return nullptr;
    std::vector<int32_t> eos;
    {
        PyObject* s = PySequence_Fast(end_ids, "end_ids must be a sequence of ints");
        if (!s) return nullptr;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(s); ++i) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(s, i));
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(s);
                return nullptr;
            }
            eos.push_back(static_cast<int32_t>(v));
        }
        Py_DECREF(s);
        std::sort(eos.begin(), eos.end());
        eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
    }
    // a tuple of our own: the str objects stay alive while the GIL is released below
    PyObject* seq = PySequence_Tuple(values);
    if (!seq) return nullptr;
    Py_ssize_t k = PyTuple_GET_SIZE(seq);
    PyObject** items = &PyTuple_GET_ITEM(seq, 0);
    Buf<Str> strs;
    Buf<uint8_t> joined;  // the values (+ terminator) in one buffer
    // temporaries from 1 MB are mapped apart and returned when freed: from malloc's heap they
    // would stay in the process's RSS after the compile
    strs.huge_min = joined.huge_min = BIG_VEC_MIN;
    if (!strs.resize(static_cast<size_t>(k))) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    const int64_t tl = static_cast<int64_t>(termb.size());
    std::vector<int64_t> offs;
    for (Py_ssize_t i = 0; i < k; ++i) {
        PyObject* o = items[i];
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "values[%zd] is not a str", i);
            Py_DECREF(seq);
            return nullptr;
        }
        Py_ssize_t len;
        const char* p = PyUnicode_AsUTF8AndSize(o, &len);
        if (!p) {
            Py_DECREF(seq);
            return nullptr;
        }
        strs[static_cast<size_t>(i)] = {reinterpret_cast<const uint8_t*>(p), len};
    }
    {
        // one contiguous copy (values + terminator) in input order: the sort and the trie then
        // read one buffer instead of objects spread over the heap
        size_t total = 0;
        for (auto& s : strs) total += static_cast<size_t>(s.n + tl);
        if (!joined.resize(total + 1)) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        size_t at = 0;
        for (auto& s : strs) {
            if (s.n) std::memcpy(joined.data() + at, s.p, static_cast<size_t>(s.n));
            if (tl) std::memcpy(joined.data() + at + s.n, termb.data(), static_cast<size_t>(tl));
            s = {joined.data() + at, s.n + tl};
            at += static_cast<size_t>(s.n);
        }
    }
    // values stay alive (seq holds them) until the end of this function
    lap.mark("collect");
    PyThreadState* save = PyEval_SaveThread();
    CompileInput in{strs, joined, tri, tl, eos, allow_end != 0, max_keys, threads, split_min};
    CompileOutput o;
    const CompileStatus status = compile_set(in, o, lap);
    PyEval_RestoreThread(save);
    Py_DECREF(seq);  // the values' bytes are not read past this point
    switch (status) {
        case CompileStatus::kNoMemory:
            return PyErr_NoMemory();
        case CompileStatus::kTooManyNodes:
            return PyErr_Format(PyExc_OverflowError, "more than 2**31 trie nodes: node ids would overflow int32; split the set into smaller ones");
        case CompileStatus::kTooManyPairs:
            return PyErr_Format(PyExc_OverflowError, "more than 2**31 (state, token) pairs: split the set");
        default:
            break;
    }
    Buf<uint8_t>& vbytes = o.vbytes;
    Buf<int64_t>& voff = o.voff;
    if (status == CompileStatus::kUnreachable) {
        std::vector<int64_t>& bad = o.bad;
        PyObject* lst = PyList_New(static_cast<Py_ssize_t>(bad.size()));
        if (!lst) return nullptr;
        for (size_t i = 0; i < bad.size(); ++i)
            PyList_SET_ITEM(lst, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bad[i]));
        PyObject* arrays = PyDict_New();
        PyObject* vb = to_numpy(vbytes, NPY_UINT8);
        PyObject* vo = to_numpy(voff, NPY_INT64);
        if (!arrays || !vb || !vo) return nullptr;
        PyDict_SetItemString(arrays, "value_bytes", vb);
        PyDict_SetItemString(arrays, "value_offsets", vo);
        Py_DECREF(vb);
        Py_DECREF(vo);
        return Py_BuildValue("(NN)", arrays, lst);
    }
    Buf<int32_t>&row_ptr = o.row_ptr, &tokens = o.tokens, &far_pos = o.far_pos, &far_child = o.far_child,
                 &ends = o.ends, &drank = o.drank, &kfirst = o.kfirst, &lcps = o.lcps;
    Buf<uint16_t>& children = o.children;
    Buf<uint64_t>& dbits = o.dbits;
    Buf<int64_t>& info = o.info;
    bool ok = true;
    PyObject* result = nullptr;
    Named out[] = {
        {"row_ptr", to_numpy(row_ptr, NPY_INT32)},   {"tokens", to_numpy(tokens, NPY_INT32)},
        {"children", to_numpy(children, NPY_UINT16)}, {"far_pos", to_numpy(far_pos, NPY_INT32)},
        {"far_child", to_numpy(far_child, NPY_INT32)}, {"ends", to_numpy(ends, NPY_INT32)},
        {"value_bytes", to_numpy(vbytes, NPY_UINT8)}, {"value_offsets", to_numpy(voff, NPY_INT64)},
    };
    PyObject* arrays = dict_of(out);
    if (!arrays) return nullptr;
    if (info.n) {
        Named more[] = {
            {"demand_bits", to_numpy(dbits, NPY_UINT64)}, {"demand_rank", to_numpy(drank, NPY_INT32)},
            {"key_first", to_numpy(kfirst, NPY_INT32)},   {"key_lcp", to_numpy(lcps, NPY_INT32)},
            {"compact_info", to_numpy(info, NPY_INT64)},
        };
        for (auto& it : more) {
            if (!it.obj || PyDict_SetItemString(arrays, it.name, it.obj) < 0) ok = false;
        }
        for (auto& it : more) Py_XDECREF(it.obj);
        if (!ok) {
            Py_DECREF(arrays);
            return nullptr;
        }
    }
    result = Py_BuildValue("(NO)", arrays, Py_None);
    lap.mark("out");
    return result;
}


}  // namespace trierouter
