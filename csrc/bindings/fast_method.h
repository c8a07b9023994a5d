// The per-step entry points (a step, a mask, a bitmask fill, a batch; a matcher's accept and
// rollback) bound as CPython METH_FASTCALL method descriptors rather than nanobind functions.
//
// Why: these are called once per decoded token or batch, and their work is tens of ns. Through
// nanobind each call paid its dispatch (bound-method object, overload loop, cleanup list: ~14 ns)
// and, for each numpy array argument, a DLPack import (~80 ns): Core.advance 47 -> 61 ns,
// advance_batch of 8 rows 165 -> 411 ns against the hand-written build they replaced
// (benchmarks/bindings_overhead.py). A method descriptor is called by the interpreter's own fast
// path, and numpy arrays are read through the buffer protocol (dtype, dimensions, contiguity
// checked here); objects without it (torch tensors) still come in through DLPack (nb::ndarray).
//
// What stays typed: each method is an ordinary C++ function whose parameters are the argument
// types below (each built from one Python argument, in order, or a TypeError naming it); its name,
// argument names (by position or keyword), defaults and signature (__text_signature__) are given
// once, where it is bound. Everything that is not per step stays a nanobind function.
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/common.h"

#pragma GCC visibility push(hidden)

namespace trierouter {

// One argument as passed: the object and the name errors give it.
struct Src {
    PyObject* o;
    const char* name;
};

// An int read as int64, saturating past its range (as Sat64).
struct IntArg {
    int64_t v = 0;
    explicit IntArg(Src s) {
        if (!read_saturating(s.o, &v)) refuse(s);
    }
    operator int64_t() const { return v; }
    [[noreturn]] static void refuse(Src s);
};

// Any object (nullptr never: a left-out argument has its default).
struct AnyArg {
    nb::handle h;
    explicit AnyArg(Src s) : h(s.o) {}
};

// A held Py_buffer, released with its holder.
struct HeldView {
    Py_buffer b{};
    bool held = false;
    HeldView() = default;
    HeldView(const HeldView&) = delete;
    HeldView& operator=(const HeldView&) = delete;
    ~HeldView() {
        if (held) PyBuffer_Release(&b);
    }
    // PyObject_GetBuffer(o, flags): false (no Python error left) when ``o`` has no buffer
    // protocol at all; a TypeError naming ``name`` when it has one that refuses ``flags``.
    bool get(PyObject* o, int flags, const char* name, const char* wanted);
};

// The numpy name of a buffer's items ("int64", "float32", ...), or its struct format.
std::string buffer_dtype(const Py_buffer& b);
// Whether the buffer's items are native-order ``kind`` ('i' signed, 'u' unsigned) of ``size`` bytes.
bool buffer_is(const Py_buffer& b, char kind, size_t size);
// "a 2-D int32 array", "a list", ...: what was passed, for an error.
std::string described(PyObject* o, const Py_buffer* b);

template <class T>
constexpr const char* dtype_name() {
    if constexpr (std::is_same_v<T, int64_t>) return "int64";
    if constexpr (std::is_same_v<T, int32_t>) return "int32";
    if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
    if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
}

enum ArrayFlags : unsigned { kReadOnly = 0, kOptional = 1, kWritable = 2 };

// A contiguous 1-D array of T (numpy through its buffer, anything else with __dlpack__ through
// nb::ndarray); with kOptional, None too (data() null); with kWritable, written to. TypeError
// naming the argument, the dtype wanted and what was given otherwise.
template <class T, unsigned Flags = kReadOnly>
class Array1 {
  public:
    using Elem = std::conditional_t<(Flags & kWritable) != 0, T, const T>;
    explicit Array1(Src s) {
        if ((Flags & kOptional) && s.o == Py_None) return;
        given_ = true;
        static const std::string wanted = std::string("a contiguous 1-D ") + dtype_name<T>() + " array";
        const int flags = PyBUF_RECORDS_RO | ((Flags & kWritable) ? PyBUF_WRITABLE : 0);
        if (view_.get(s.o, flags, s.name, wanted.c_str())) {
            const Py_buffer& b = view_.b;
            if (b.ndim != 1 || !buffer_is(b, std::is_signed_v<T> ? 'i' : 'u', sizeof(T)) ||
                (b.shape[0] > 1 && b.strides[0] != static_cast<Py_ssize_t>(sizeof(T))))
                throw nb::type_error(
                    (std::string(s.name) + ": expected " + wanted + ", got " + described(s.o, &b)).c_str());
            p_ = static_cast<Elem*>(b.buf);
            n_ = static_cast<size_t>(b.shape[0]);
            return;
        }
        auto& dl = dl_.emplace();
        if (!nb::try_cast(nb::handle(s.o), dl, false))
            throw nb::type_error(
                (std::string(s.name) + ": expected " + wanted + ", got " + described(s.o, nullptr)).c_str());
        p_ = dl.data();
        n_ = dl.shape(0);
    }
    Elem* data() const { return p_; }
    size_t size() const { return n_; }
    bool given() const { return given_; }

  private:
    HeldView view_;
    std::optional<nb::ndarray<Elem, nb::ndim<1>, nb::c_contig, nb::device::cpu>> dl_;  // no buffer: DLPack
    Elem* p_ = nullptr;
    size_t n_ = 0;
    bool given_ = false;
};

// A writable 1-D or 2-D array of any dtype, strided (a bitmask or logits: numpy through its
// buffer, a torch CPU tensor through DLPack); with ``Optional``, None too (base null).
template <bool Optional = false>
struct WritableArg {
    char* base = nullptr;
    size_t ndim = 0, itemsize = 0;
    int64_t shape[2] = {0, 0}, stride[2] = {0, 0};  // strides in bytes
    explicit WritableArg(Src s) {
        if (Optional && s.o == Py_None) return;
        given_ = true;
        static constexpr const char* wanted = "a writable array (numpy, or a torch CPU tensor)";
        if (view_.get(s.o, PyBUF_RECORDS, s.name, wanted)) {
            const Py_buffer& b = view_.b;
            set(b.buf, static_cast<size_t>(b.ndim), static_cast<size_t>(b.itemsize), b.shape, b.strides, 1);
            return;
        }
        auto& dl = dl_.emplace();
        if (!nb::try_cast(nb::handle(s.o), dl, false))
            throw nb::type_error(
                (std::string(s.name) + ": expected " + wanted + ", got " + described(s.o, nullptr)).c_str());
        const size_t nd = dl.ndim();
        int64_t sh[2] = {0, 0}, st[2] = {0, 0};
        for (size_t i = 0; i < nd && i < 2; ++i) {
            sh[i] = static_cast<int64_t>(dl.shape(i));
            st[i] = dl.stride(i);
        }
        set(dl.data(), nd, dl.itemsize(), sh, st, static_cast<int64_t>(dl.itemsize()));
    }
    bool given() const { return given_; }

  private:
    template <class S>
    void set(void* p, size_t nd, size_t item, const S* sh, const S* st, int64_t scale) {
        base = static_cast<char*>(p);
        ndim = nd;
        itemsize = item;
        for (size_t i = 0; i < nd && i < 2; ++i) {
            shape[i] = static_cast<int64_t>(sh[i]);
            stride[i] = static_cast<int64_t>(st[i]) * scale;
        }
    }
    HeldView view_;
    std::optional<nb::ndarray<nb::device::cpu>> dl_;  // no buffer: DLPack
    bool given_ = false;
};

// Sets the Python error of the exception being handled (as nanobind's dispatch translates it:
// its builtin exceptions to their types, std::bad_alloc to MemoryError, other std::exceptions
// to ValueError / IndexError / OverflowError / RuntimeError).
void set_error_from_exception() noexcept;

// A parameter of a fast method: its name and, unless required, its default.
struct Param {
    const char* name;
    nb::object dflt{};
};

// What a fast method is called with, and its binding's data.
struct FastSpec {
    std::string name, doc;
    std::vector<const char*> names;
    std::vector<PyObject*> defaults;  // null: required (held for the module's life)
    PyMethodDef def{};
    // ``args`` (positional, then keyword values named by ``kwnames``) into ``slots`` in
    // parameter order, defaults filled in; false with a TypeError set when they do not fit.
    bool bind(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** slots) const;
};

// The arguments, converted left to right (the first bad one is the one reported).
template <class... A>
struct Converted;
template <>
struct Converted<> {
    Converted(PyObject* const*, const char* const*) {}
};
template <class H, class... T>
struct Converted<H, T...> {
    H head;
    Converted<T...> tail;
    Converted(PyObject* const* o, const char* const* n) : head(Src{o[0], n[0]}), tail(o + 1, n + 1) {}
};
template <size_t I, class H, class... T>
auto& get(Converted<H, T...>& c) {
    if constexpr (I == 0)
        return c.head;
    else
        return get<I - 1>(c.tail);
}

template <auto F, class Sig = decltype(F)>
struct FastMethod;

template <auto F, class R, class... A>
struct FastMethod<F, R (*)(nb::handle, A...)> {
    static constexpr size_t N = sizeof...(A);
    static inline FastSpec spec;

    static PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) noexcept {
        PyObject* slots[N > 0 ? N : 1];
        PyObject* const* given = args;  // every argument by position: as they are
        if (kwnames || static_cast<size_t>(nargs) != N) {
            if (!spec.bind(args, nargs, kwnames, slots)) return nullptr;
            given = slots;
        }
        try {
            return invoke(self, given, std::index_sequence_for<A...>{});
        } catch (...) {
            set_error_from_exception();
            return nullptr;
        }
    }

    template <size_t... I>
    static PyObject* invoke(PyObject* self, PyObject* const* slots, std::index_sequence<I...>) {
        Converted<std::decay_t<A>...> c(slots, spec.names.data());
        if constexpr (std::is_void_v<R>) {
            F(nb::handle(self), get<I>(c)...);
            return Py_NewRef(Py_None);
        } else if constexpr (std::is_same_v<R, bool>) {
            return PyBool_FromLong(F(nb::handle(self), get<I>(c)...));
        } else if constexpr (std::is_integral_v<R>) {
            return PyLong_FromLongLong(F(nb::handle(self), get<I>(c)...));
        } else {
            return F(nb::handle(self), get<I>(c)...).release().ptr();
        }
    }
};

// Fills ``spec`` (signature in the doc, as __text_signature__ reads it) and sets the method
// descriptor on ``cls``.
void add_fast_method(nb::handle cls, FastSpec& spec, const char* name, std::initializer_list<Param> params,
                     const char* doc, PyCFunction fn);

// Binds F (``R F(nb::handle self, A... args)``, each A built from one argument) as method
// ``name`` of ``cls``, its parameters named by ``params`` in order.
template <auto F>
void fast_method(nb::handle cls, const char* name, std::initializer_list<Param> params, const char* doc) {
    using M = FastMethod<F>;
    if (params.size() != M::N) throw std::logic_error(std::string(name) + ": a name for every parameter");
    add_fast_method(cls, M::spec, name, params, doc,
                    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&M::call)));
}

}  // namespace trierouter

#pragma GCC visibility pop
