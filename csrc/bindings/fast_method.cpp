// The per-step entry points' binding (see fast_method.h): arguments, buffers, errors.
#include "bindings/fast_method.h"

#include <new>
#include <stdexcept>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "buffer_is reads '<' as the native byte order: a little-endian target only"
#endif

namespace trierouter {

void IntArg::refuse(Src s) {
    throw nb::type_error((std::string(s.name) + ": expected an int, got " + described(s.o, nullptr)).c_str());
}

bool HeldView::get(PyObject* o, int flags, const char* name, const char* wanted) {
    if (PyObject_GetBuffer(o, &b, flags) == 0) {
        held = true;
        return true;
    }
    PyErr_Clear();
    if (!PyObject_CheckBuffer(o)) return false;
    std::string got = "got " + described(o, nullptr);
    Py_buffer ro;
    if ((flags & PyBUF_WRITABLE) && PyObject_GetBuffer(o, &ro, flags & ~PyBUF_WRITABLE) == 0) {
        got = "got a read-only " + described(o, &ro).substr(2);  // "a 2-D ..." -> "2-D ..."
        PyBuffer_Release(&ro);
    } else {
        PyErr_Clear();
    }
    throw nb::type_error((std::string(name) + ": expected " + wanted + ", " + got).c_str());
}

namespace {
// The struct-module item code of a native-order buffer ('<', '=' and '@' are native here), or
// 0 for a big-endian or compound one.
char item_code(const Py_buffer& b) {
    const char* f = b.format ? b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    return f[0] && !f[1] ? f[0] : 0;
}
}  // namespace

bool buffer_is(const Py_buffer& b, char kind, size_t size) {
    char k = 0;
    switch (item_code(b)) {
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': k = 'i'; break;
        case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': k = 'u'; break;
        default: return false;
    }
    return k == kind && static_cast<size_t>(b.itemsize) == size;
}

std::string buffer_dtype(const Py_buffer& b) {
    const std::string bits = std::to_string(8 * b.itemsize);
    switch (item_code(b)) {
        case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': return "int" + bits;
        case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': return "uint" + bits;
        case 'e': case 'f': case 'd': return "float" + bits;
        case '?': return "bool";
        default: return std::string("format '") + (b.format ? b.format : "B") + "'";
    }
}

std::string described(PyObject* o, const Py_buffer* b) {
    if (b) {
        bool contiguous = true;
        Py_ssize_t expect = b->itemsize;
        for (int i = b->ndim - 1; i >= 0 && b->strides; --i) {
            if (b->shape[i] > 1 && b->strides[i] != expect) contiguous = false;
            expect *= b->shape[i];
        }
        return "a " + std::to_string(b->ndim) + "-D " + std::string(contiguous ? "" : "non-contiguous ") +
               buffer_dtype(*b) + " array";
    }
    return nb::type_name(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(o)))).c_str();
}

void set_error_from_exception() noexcept {
    try {
        throw;
    } catch (nb::python_error& e) {
        e.restore();
    } catch (const nb::builtin_exception& e) {
        PyObject* t = PyExc_RuntimeError;
        switch (e.type()) {
            case nb::exception_type::stop_iteration: t = PyExc_StopIteration; break;
            case nb::exception_type::index_error: t = PyExc_IndexError; break;
            case nb::exception_type::key_error: t = PyExc_KeyError; break;
            case nb::exception_type::value_error: t = PyExc_ValueError; break;
            case nb::exception_type::type_error: t = PyExc_TypeError; break;
            case nb::exception_type::buffer_error: t = PyExc_BufferError; break;
            case nb::exception_type::import_error: t = PyExc_ImportError; break;
            case nb::exception_type::attribute_error: t = PyExc_AttributeError; break;
            default: break;
        }
        PyErr_SetString(t, e.what());
    } catch (const std::bad_alloc& e) {
        PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const std::domain_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::length_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::out_of_range& e) {
        PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const std::range_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::overflow_error& e) {
        PyErr_SetString(PyExc_OverflowError, e.what());
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_SystemError, "an unknown C++ exception");
    }
}

bool FastSpec::bind(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** slots) const {
    const size_t n = names.size();
    if (static_cast<size_t>(nargs) > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zu arguments (%zd given)", name.c_str(), n, nargs);
        return false;
    }
    for (size_t i = 0; i < n; ++i) slots[i] = i < static_cast<size_t>(nargs) ? args[i] : nullptr;
    const Py_ssize_t n_kw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < n_kw; ++k) {
        PyObject* key = PyTuple_GetItem(kwnames, k);
        size_t i = 0;
        while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
        if (i == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", name.c_str(), key);
            return false;
        }
        if (slots[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", name.c_str(), names[i]);
            return false;
        }
        slots[i] = args[nargs + k];
    }
    for (size_t i = 0; i < n; ++i) {
        if (slots[i]) continue;
        if (!defaults[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %zu)", name.c_str(), names[i],
                         i + 1);
            return false;
        }
        slots[i] = defaults[i];
    }
    return true;
}

void add_fast_method(nb::handle cls, FastSpec& spec, const char* name, std::initializer_list<Param> params,
                     const char* doc, PyCFunction fn) {
    if (spec.name.empty()) {  // once per process (a module initialised again reuses it)
        spec.name = name;
        std::string sig = spec.name + "($self";
        for (const Param& p : params) {
            spec.names.push_back(p.name);
            spec.defaults.push_back(p.dflt.is_valid() ? p.dflt.inc_ref().ptr() : nullptr);
            sig += std::string(", ") + p.name;
            if (p.dflt.is_valid()) sig += "=" + std::string(nb::repr(p.dflt).c_str());
        }
        spec.doc = sig + ")\n--\n\n" + doc;
        spec.def = {spec.name.c_str(), fn, METH_FASTCALL | METH_KEYWORDS, spec.doc.c_str()};
    } else if (spec.name != name) {
        throw std::logic_error(spec.name + " and " + name + ": one C++ function bound under two names");
    }
    nb::object descr = nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &spec.def));
    if (!descr.is_valid()) throw nb::python_error();
    nb::setattr(cls, name, descr);
}

}  // namespace trierouter
