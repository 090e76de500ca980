/* Long-lived state rows out of the cyclic collector's sight.
 *
 * Why: the operators keep a small list per remembered identity, per ledger payment and per
 * receipt in its window, alive for as long as the run keeps them (the ledger, all of its
 * payments). Every list is tracked by the cyclic collector, so each young collection in a run
 * walks the rows made since the one before it, and they are most of what it walks: the rows
 * are the objects that outlive their batch. CPython stops tracking a tuple or a dict that holds
 * no object the collector could need (nothing that can be part of a reference cycle), but
 * never a list. A row of ints, texts and None can be part of no cycle either, so it need not be
 * walked: `untrack_flat` does for such a list what CPython does for such a tuple.
 *
 * Safe by construction: a list is left tracked when any item is an object the collector might
 * track (CPython's own test for a tuple's items), and an untracked object is, to the collector,
 * one held from outside, so whatever it refers to is never collected early. A row that later
 * took a container and became part of a cycle would leak that cycle, never free it early:
 * the rows untracked are the operators' state rows, whose slots hold only ints, texts and None
 * (streaming/collector.py names them; tests/test_collector.py checks each). Built by
 * `python -m riskstream_tools.native_build` beside the mypyc modules and used only with them;
 * without it the rows stay tracked, which costs collections, never an answer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Whether the collector could need to see `v` (CPython's _PyObject_GC_MAY_BE_TRACKED): a
 * tuple it has stopped tracking holds nothing it needs either. */
static int may_be_tracked(PyObject *v) {
    if (!PyObject_IS_GC(v))
        return 0;
    if (PyTuple_CheckExact(v))
        return PyObject_GC_IsTracked(v);
    return 1;
}

static PyObject *untrack_flat(PyObject *module, PyObject *row) {
    if (!PyList_CheckExact(row)) {
        PyErr_Format(PyExc_TypeError, "untrack_flat() takes a list, not %.100s",
                     Py_TYPE(row)->tp_name);
        return NULL;
    }
    if (PyObject_GC_IsTracked(row)) {
        Py_ssize_t n = PyList_GET_SIZE(row);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (may_be_tracked(PyList_GET_ITEM(row, i)))
                Py_RETURN_FALSE;
        }
        PyObject_GC_UnTrack(row);
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"untrack_flat", untrack_flat, METH_O,
     "untrack_flat(row, /)\n--\n\nTake a list out of the cyclic collector's sight when none of "
     "its items is an object the collector could need to see; whether it is out of sight "
     "now."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_collector",
    "Long-lived state rows out of the cyclic collector's sight (streaming.collector).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__collector(void) { return PyModule_Create(&module_def); }
