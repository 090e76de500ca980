/* A binary heap of times on a Python list: heapq's push and pop, comparing two ints in C.
 *
 * Why: a `TimeQueue` keeps the times pushed out of order in a heap (the receipt scorer's
 * pending and eviction queues hold three pushes in four there). heapq compares its items
 * through the generic rich comparison, about 110 instructions for two ints; the heap's
 * push and pop were 7.5% of the scorer's instructions (docs/performance.md, fifty-first round).
 * Here two exact ints are compared as CPython compares them, from their digits, and anything
 * else through the rich comparison, as heapq does.
 *
 * The same algorithm as CPython's Modules/_heapqmodule.c (push sifts the new item up; pop
 * moves the last item to the root, walks the smaller child up to a leaf and sifts back), so the
 * list holds the same items in the same places as heapq would leave it. heapq's functions are
 * the twin (streaming/state.py uses them when the compiled set is not in use). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define INTS_IN_C 1
/* a < b for two exact ints, as CPython 3.11 compares them (Objects/longobject.c,
 * long_compare): the sign and the count of 30-bit digits in ob_size, then the digits from the
 * most significant. */
static inline int ints_less(PyObject *a, PyObject *b) {
    Py_ssize_t sa = Py_SIZE(a), sb = Py_SIZE(b);
    if (sa != sb)
        return sa < sb;
    Py_ssize_t n = sa < 0 ? -sa : sa;
    const digit *da = ((PyLongObject *)a)->ob_digit;
    const digit *db = ((PyLongObject *)b)->ob_digit;
    while (--n >= 0 && da[n] == db[n])
        ;
    if (n < 0)
        return 0;
    return sa < 0 ? da[n] > db[n] : da[n] < db[n];
}
#endif

/* a < b for two items of `heap`, which holds `size` items: 1, 0, or -1 with an exception set.
 * Two ints compare in C. Anything else goes through the rich comparison, which may run Python
 * code: the items are held across it and the list must not have changed size (heapq's
 * check). */
static int less_in(PyListObject *heap, Py_ssize_t size, PyObject *a, PyObject *b) {
#ifdef INTS_IN_C
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b))
        return ints_less(a, b);
#endif
    Py_INCREF(a);
    Py_INCREF(b);
    int cmp = PyObject_RichCompareBool(a, b, Py_LT);
    Py_DECREF(b);
    Py_DECREF(a);
    if (cmp >= 0 && size != PyList_GET_SIZE(heap)) {
        PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
        return -1;
    }
    return cmp;
}

/* Move the item at `pos` up towards `startpos` until its parent is not greater. */
static int sift_down(PyListObject *heap, Py_ssize_t startpos, Py_ssize_t pos) {
    Py_ssize_t size = PyList_GET_SIZE(heap);
    if (pos >= size) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return -1;
    }
    while (pos > startpos) {
        Py_ssize_t parentpos = (pos - 1) >> 1;
        int cmp = less_in(heap, size, heap->ob_item[pos], heap->ob_item[parentpos]);
        if (cmp < 0)
            return -1;
        if (cmp == 0)
            break;
        /* Read again: a comparison in Python may have reordered the list. */
        PyObject **arr = heap->ob_item, *item = arr[pos];
        arr[pos] = arr[parentpos];
        arr[parentpos] = item;
        pos = parentpos;
    }
    return 0;
}

/* Walk the smaller child of `pos` up until a leaf, then sift the item there back. */
static int sift_up(PyListObject *heap, Py_ssize_t pos) {
    Py_ssize_t endpos = PyList_GET_SIZE(heap), startpos = pos;
    if (pos >= endpos) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return -1;
    }
    Py_ssize_t limit = endpos >> 1;  /* the first position with no child */
    while (pos < limit) {
        Py_ssize_t childpos = 2 * pos + 1;
        if (childpos + 1 < endpos) {
            int cmp = less_in(heap, endpos, heap->ob_item[childpos], heap->ob_item[childpos + 1]);
            if (cmp < 0)
                return -1;
            childpos += ((unsigned)cmp ^ 1);  /* the right child when the left is not less */
        }
        PyObject **arr = heap->ob_item, *child = arr[childpos];
        arr[childpos] = arr[pos];
        arr[pos] = child;
        pos = childpos;
    }
    return sift_down(heap, startpos, pos);
}

static PyObject *heappush(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "heappush() takes 2 arguments");
        return NULL;
    }
    PyObject *heap = args[0];
    if (!PyList_Check(heap)) {
        PyErr_SetString(PyExc_TypeError, "heap argument must be a list");
        return NULL;
    }
    if (PyList_Append(heap, args[1]) < 0)
        return NULL;
    if (sift_down((PyListObject *)heap, 0, PyList_GET_SIZE(heap) - 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *heappop(PyObject *module, PyObject *heap) {
    if (!PyList_Check(heap)) {
        PyErr_SetString(PyExc_TypeError, "heap argument must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (n == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyListObject *list = (PyListObject *)heap;
    /* The last item taken out with the list's reference to it, which is now ours: the list
     * only shrinks (its storage stays, as list.pop leaves it unless it falls below half; the
     * next append resizes it). heapq's slice assignment cost more than the sift. */
    PyObject *last = list->ob_item[n - 1];
    Py_SET_SIZE(list, n - 1);
    n--;
    if (n == 0)
        return last;
    PyObject *top = list->ob_item[0];
    list->ob_item[0] = last;
    if (sift_up(list, 0) < 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
}

static PyMethodDef methods[] = {
    {"heappush", (PyCFunction)(void (*)(void))heappush, METH_FASTCALL,
     "heappush(heap, item, /)\n--\n\nPush item onto heap, maintaining the heap invariant "
     "(heapq.heappush, comparing ints in C)."},
    {"heappop", heappop, METH_O,
     "heappop(heap, /)\n--\n\nPop the smallest item off the heap, maintaining the heap "
     "invariant (heapq.heappop, comparing ints in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_heap",
    "A heap of times on a list: heapq's push and pop, comparing ints in C (streaming.state).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__heap(void) { return PyModule_Create(&module_def); }
