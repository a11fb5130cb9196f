/* plugdrop: the fused DropBlock kernel's call as a CPython function, for the hooks' small
 * tensors, where a call's cost is the host's work around the kernel.
 *
 * Compiled together with blockdrop.c into one shared library where the Python headers are
 * found (plugdrop/_kernels/cext.py): ctypes loads it for the kernel's other entry points, and
 * Python imports it as the module _plugdrop_cext, whose keyed() is plugdrop_blockdrop_key
 * called with Python ints (addresses) through METH_FASTCALL, without ctypes' argument
 * conversion and libffi's call (most of the cost of a foreign call on a small tensor). The
 * same kernel and the same arguments: the same values. Where it cannot be built, ctypes calls
 * the same function.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

int plugdrop_blockdrop_key(const int64_t *a, int threads, const void *x, void *out,
                           const int64_t *key);

/* keyed(args, threads, x, out, key): plugdrop_blockdrop_key(args, threads, x, out, key),
 * args, x, out and key as addresses; returns its status (0: done, -1: out of memory). */
static PyObject *keyed(PyObject *self, PyObject *const *argv, Py_ssize_t n) {
    (void)self;
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "keyed(args, threads, x, out, key) takes 5 integers");
        return NULL;
    }
    void *p[5];
    for (int i = 0; i < 5; ++i) {
        if (i == 1) continue;
        p[i] = PyLong_AsVoidPtr(argv[i]);
        if (p[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "keyed: a null address");
            return NULL;
        }
    }
    const long threads = PyLong_AsLong(argv[1]);
    if (threads == -1 && PyErr_Occurred()) return NULL;
    const int rc = plugdrop_blockdrop_key((const int64_t *)p[0], (int)threads, p[2], p[3],
                                          (const int64_t *)p[4]);
    return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
    {"keyed", (PyCFunction)(void (*)(void))keyed, METH_FASTCALL,
     "keyed(args, threads, x, out, key): the kernel's packed call, key read from memory"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plugdrop_cext", NULL, -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__plugdrop_cext(void) { return PyModule_Create(&module); }
