/* One call per batch key: copy every sequence's bytes from a mapped dataset into its row of a
 * padded batch, zero the padding, and test float rows for NaN/Inf in the same pass.
 *
 * Optional: the package builds it where a C compiler exists (setup.py, optional=True); without
 * it (or with SEQLOADER_NO_KERNEL=1) the numpy path of sources/hdf_read.py does the same work.
 * Called from sources/row_kernel.py only, which checks the dtypes and layouts first; the bounds
 * of every span are checked here again before any byte is written.
 *
 * A float value is NaN or Inf exactly when its exponent bits are all ones. With y = ~x & EXP
 * (zero exactly then), y - 1 wraps to all ones only for y == 0, and its top bit is clear
 * otherwise (y < 2^(bits - 1)): OR-ing (y - 1) over a row and testing the top bit once is exact
 * (no false alarm from large finite values) and is plain load/and-not/sub/or/store per value,
 * which the compiler vectorises beside the copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict /* MSVC's C has the keyword under this name */
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* the loop compiled twice, picked at load time by the CPU (AVX2 where present) */
#define SL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SL_CLONES
#endif

#define FUSED(NAME, T, EXP, TOP)                                                      \
    SL_CLONES static int NAME(unsigned char *restrict d, const unsigned char *restrict s, \
                              size_t n) {                                             \
        T acc = 0;                                                                    \
        for (size_t i = 0; i < n; i++) {                                              \
            T x;                                                                      \
            memcpy(&x, s + i * sizeof(T), sizeof(T));                                 \
            memcpy(d + i * sizeof(T), &x, sizeof(T));                                 \
            acc |= (T)((T)(~x & (T)(EXP)) - (T)1);                                    \
        }                                                                             \
        return (acc & (T)(TOP)) != 0;                                                 \
    }

FUSED(copy_check16, uint16_t, 0x7c00u, 0x8000u)
FUSED(copy_check32, uint32_t, 0x7f800000u, 0x80000000u)
FUSED(copy_check64, uint64_t, 0x7ff0000000000000ull, 0x8000000000000000ull)

/* a 1-D buffer of int64 (numpy's int64 array, format 'q' or 'l' where long is 64 bits) */
static int int64_view(PyObject *obj, Py_buffer *view, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->itemsize != 8 || !(f[0] == 'q' || f[0] == 'l') || f[1] != '\0' ||
        (n >= 0 && view->len != n * 8)) {
        PyBuffer_Release(view);
        return 1;
    }
    return 0;
}

PyDoc_STRVAR(copy_rows_doc,
             "copy_rows(src, dst, begin, end, pos, frame, row, check, screen) -> list | None\n"
             "\n"
             "Rows [begin[j], end[j]) of ``src`` (bytes of a [rows, *feat] dataset, ``frame`` bytes a\n"
             "row) into row pos[j] of ``dst`` (a padded [B, T, *feat] batch, ``row`` bytes a batch row),\n"
             "zeros after each (``pos`` None: row j). ``check`` (the float itemsize 2, 4 or 8; 0: none)\n"
             "tests every copied value for NaN/Inf, of the rows j with screen[j] (all when ``screen``\n"
             "is None).\n"
             "Returns the j whose rows hold NaN/Inf, or None, writing nothing, when a span does not\n"
             "fit the source or its row of ``dst`` or an argument is not as described.");

static PyObject *copy_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "copy_rows takes 9 arguments");
        return NULL;
    }
    Py_ssize_t frame = PyLong_AsSsize_t(args[5]);
    Py_ssize_t row = PyLong_AsSsize_t(args[6]);
    long check = PyLong_AsLong(args[7]);
    if (PyErr_Occurred()) return NULL;
    if (frame <= 0 || row <= 0 || !(check == 0 || check == 2 || check == 4 || check == 8))
        Py_RETURN_NONE;

    Py_buffer src, dst, bv, ev, pv, sv;
    int have_src = 0, have_dst = 0, have_b = 0, have_e = 0, have_p = 0, have_s = 0;
    PyObject *result = NULL;
    unsigned char *bad = NULL;
    int r;

    if (PyObject_GetBuffer(args[0], &src, PyBUF_SIMPLE) < 0) goto error;
    have_src = 1;
    if (PyObject_GetBuffer(args[1], &dst, PyBUF_WRITABLE) < 0) goto error;
    have_dst = 1;
    if ((r = int64_view(args[2], &bv, -1)) != 0) goto refuse_or_error;
    have_b = 1;
    Py_ssize_t n = bv.len / 8;
    if ((r = int64_view(args[3], &ev, n)) != 0) goto refuse_or_error;
    have_e = 1;
    if (args[4] != Py_None) {
        if ((r = int64_view(args[4], &pv, n)) != 0) goto refuse_or_error;
        have_p = 1;
    }
    if (args[8] != Py_None) {
        if (PyObject_GetBuffer(args[8], &sv, PyBUF_SIMPLE) < 0) goto error;
        have_s = 1;
        if (sv.len != n) goto refuse;
    }

    const int64_t *b = (const int64_t *)bv.buf, *e = (const int64_t *)ev.buf;
    const int64_t *p = have_p ? (const int64_t *)pv.buf : NULL;
    const unsigned char *scr = have_s ? (const unsigned char *)sv.buf : NULL;
    const Py_ssize_t rows_src = src.len / frame, rows_dst = dst.len / row, t_max = row / frame;
    /* every span inside the source and inside its row of dst, before any byte is written */
    if (!have_p && n > rows_dst) goto refuse;
    if (check && frame % check) goto refuse;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (b[j] < 0 || e[j] < b[j] || e[j] > rows_src) goto refuse;
        if (e[j] - b[j] > t_max) goto refuse;
        if (p && (p[j] < 0 || p[j] >= rows_dst)) goto refuse;
    }
    if (check && n) {
        bad = (unsigned char *)PyMem_Calloc((size_t)n, 1);
        if (!bad) {
            PyErr_NoMemory();
            goto error;
        }
    }

    unsigned char *out = (unsigned char *)dst.buf;
    const unsigned char *in = (const unsigned char *)src.buf;
    int any = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t j = 0; j < n; j++) {
        unsigned char *d = out + (p ? p[j] : j) * row;
        const unsigned char *s = in + b[j] * frame;
        size_t len = (size_t)((e[j] - b[j]) * frame);
        int found = 0;
        if (check && (!scr || scr[j])) {
            if (check == 4)
                found = copy_check32(d, s, len / 4);
            else if (check == 2)
                found = copy_check16(d, s, len / 2);
            else
                found = copy_check64(d, s, len / 8);
        } else if (len) {
            memcpy(d, s, len);
        }
        if (found) {
            bad[j] = 1;
            any = 1;
        }
        /* each row's padding right after its values: one front-to-back pass over the row (a
         * memset of the whole batch first, then the copies, measured 1.1x the time) */
        if (len < (size_t)row) memset(d + len, 0, (size_t)row - len);
    }
    Py_END_ALLOW_THREADS;

    result = PyList_New(0);
    if (result && any) {
        for (Py_ssize_t j = 0; j < n; j++) {
            if (!bad[j]) continue;
            PyObject *v = PyLong_FromSsize_t(j);
            if (!v || PyList_Append(result, v) < 0) {
                Py_XDECREF(v);
                Py_CLEAR(result);
                break;
            }
            Py_DECREF(v);
        }
    }
    goto done;

refuse_or_error:
    if (r < 0) goto error;
refuse:
    result = Py_None;
    Py_INCREF(result);
    goto done;
error:
    result = NULL;
done:
    PyMem_Free(bad);
    if (have_s) PyBuffer_Release(&sv);
    if (have_p) PyBuffer_Release(&pv);
    if (have_e) PyBuffer_Release(&ev);
    if (have_b) PyBuffer_Release(&bv);
    if (have_dst) PyBuffer_Release(&dst);
    if (have_src) PyBuffer_Release(&src);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_rows", (PyCFunction)(void (*)(void))copy_rows, METH_FASTCALL, copy_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rowcopy",
    "A padded batch's row copies, padding and NaN/Inf test in one call (optional; see "
    "sources/row_kernel.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcopy(void) { return PyModule_Create(&module); }
