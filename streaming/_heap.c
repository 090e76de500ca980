/* Two heaps of times for streaming.state's TimeQueue. The first is a binary heap of times on a
 * Python list: heapq's push and pop, comparing two ints in C. The second, `TimeHeap` below,
 * holds (time, item) pairs in a C array.
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

/* ---------------------------------------------------------------- a heap of timed items
 *
 * `TimeHeap`: (time, item) pairs, the time a 64-bit integer, in a C array ordered as a binary
 * heap by time alone; taken out a time at a time, that time's items sorted. It is the heap
 * a `TimeQueue` keeps the pairs pushed out of order in (streaming/state.py), where its Python
 * twin keeps the times on a list heap (`heappush`, `heappop` above) and a dictionary from
 * each time to its item or items: a lookup and a store on every push and a pop from the
 * dictionary on every take, about half of the receipt scorer's instructions in its queues'
 * pushes and takes (two thirds of a push's, a third of a take's; docs/performance.md,
 * fifty-ninth round). Here a push is a sift of two machine words and a take pops the root
 * while it holds the same time.
 *
 * Items at one time leave in item order, as the twin's (it sorts them): the heap orders by
 * time only and `time_heap_take` sorts what it appended. The queue keeps the earliest time
 * itself, from each push and from what each take returns. */

typedef struct {
    long long t;
    PyObject *item;
} Timed;

typedef struct {
    PyObject_HEAD
    Timed *slots;
    Py_ssize_t len, cap;
} TimeHeap;

static PyTypeObject TimeHeapType;

/* Drop every pair: the array is detached first, so an item's destructor that reaches this
 * heap finds it empty. */
static int time_heap_clear(TimeHeap *h) {
    Timed *slots = h->slots;
    Py_ssize_t n = h->len;
    h->slots = NULL;
    h->len = h->cap = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(slots[i].item);
    PyMem_Free(slots);
    return 0;
}

static int time_heap_traverse(TimeHeap *h, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < h->len; i++)
        Py_VISIT(h->slots[i].item);
    return 0;
}

static void time_heap_dealloc(TimeHeap *h) {
    PyObject_GC_UnTrack(h);
    time_heap_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static Py_ssize_t time_heap_length(TimeHeap *h) { return h->len; }

static PySequenceMethods time_heap_as_sequence = {
    .sq_length = (lenfunc)time_heap_length,
};

static PyTypeObject TimeHeapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streaming._heap.TimeHeap",
    .tp_basicsize = sizeof(TimeHeap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "TimeHeap()\n--\n\n(time, item) pairs, times 64-bit ints, taken out a time at a "
              "time (time_heap_push, time_heap_take).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)time_heap_dealloc,
    .tp_traverse = (traverseproc)time_heap_traverse,
    .tp_clear = (inquiry)time_heap_clear,
    .tp_as_sequence = &time_heap_as_sequence,
};

static TimeHeap *time_heap_arg(PyObject *h, const char *name) {
    if (!PyObject_TypeCheck(h, &TimeHeapType)) {
        PyErr_Format(PyExc_TypeError, "%s(): the first argument must be a TimeHeap", name);
        return NULL;
    }
    return (TimeHeap *)h;
}

/* An int as a time: -1 with OverflowError past 64 bits, TypeError for anything else.
 * (PyLong_AsLongLong reads an int of more than one digit through a byte array: about 260
 * instructions a time of microseconds, where the overflow-checking read takes about 50.) */
static int time_of(PyObject *v, long long *t) {
    if (!PyLong_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a time must be an int");
        return -1;
    }
    int overflow = 0;
    *t = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*t == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0) {
        PyErr_SetString(PyExc_OverflowError, "a time must fit in 64 bits");
        return -1;
    }
    return 0;
}

static PyObject *time_heap_push(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "time_heap_push() takes 3 arguments");
        return NULL;
    }
    TimeHeap *h = time_heap_arg(args[0], "time_heap_push");
    long long t;
    if (h == NULL || time_of(args[1], &t) < 0)
        return NULL;
    if (h->len == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 16;
        Timed *grown = PyMem_Realloc(h->slots, (size_t)cap * sizeof(Timed));
        if (grown == NULL)
            return PyErr_NoMemory();
        h->slots = grown;
        h->cap = cap;
    }
    /* The new pair goes in at the end and its parents move down past it while later. */
    Timed *s = h->slots;
    Py_ssize_t pos = h->len++;
    while (pos > 0) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if (s[parent].t <= t)
            break;
        s[pos] = s[parent];
        pos = parent;
    }
    s[pos].t = t;
    Py_INCREF(args[2]);
    s[pos].item = args[2];
    Py_RETURN_NONE;
}

/* The root's item, taken out (a new reference); the heap must not be empty. The last pair
 * moves into the root's place and down past its smaller children. */
static PyObject *pop_root(TimeHeap *h) {
    Timed *s = h->slots;
    PyObject *top = s[0].item;
    Timed last = s[--h->len];
    Py_ssize_t n = h->len, pos = 0;
    if (n == 0)
        return top;
    for (;;) {
        Py_ssize_t child = 2 * pos + 1;
        if (child >= n)
            break;
        if (child + 1 < n && s[child + 1].t < s[child].t)
            child++;
        if (s[child].t >= last.t)
            break;
        s[pos] = s[child];
        pos = child;
    }
    s[pos] = last;
    return top;
}

/* Take out the earliest time's pairs: their items are appended to `into` and `into` is
 * sorted. Returns the earliest time left, or None when the heap is empty: the caller knew the
 * time it took (it keeps the earliest, so asking whether a time below a bound is held is no
 * call at all). */
static PyObject *time_heap_take(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "time_heap_take() takes 2 arguments");
        return NULL;
    }
    TimeHeap *h = time_heap_arg(args[0], "time_heap_take");
    if (h == NULL)
        return NULL;
    PyObject *into = args[1];
    if (!PyList_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "time_heap_take(): `into` must be a list");
        return NULL;
    }
    if (h->len == 0) {
        PyErr_SetString(PyExc_IndexError, "take from an empty TimeHeap");
        return NULL;
    }
    long long t = h->slots[0].t;
    while (h->len > 0 && h->slots[0].t == t) {
        PyObject *item = pop_root(h);
        int appended = PyList_Append(into, item);
        Py_DECREF(item);
        if (appended < 0)
            return NULL;
    }
    if (PyList_GET_SIZE(into) > 1 && PyList_Sort(into) < 0)
        return NULL;
    if (h->len == 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(h->slots[0].t);
}

static PyObject *time_heap_pairs(PyObject *module, PyObject *h_) {
    TimeHeap *h = time_heap_arg(h_, "time_heap_pairs");
    if (h == NULL)
        return NULL;
    PyObject *out = PyList_New(h->len);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < h->len; i++) {
        PyObject *pair = Py_BuildValue("(LO)", h->slots[i].t, h->slots[i].item);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"heappush", (PyCFunction)(void (*)(void))heappush, METH_FASTCALL,
     "heappush(heap, item, /)\n--\n\nPush item onto heap, maintaining the heap invariant "
     "(heapq.heappush, comparing ints in C)."},
    {"heappop", heappop, METH_O,
     "heappop(heap, /)\n--\n\nPop the smallest item off the heap, maintaining the heap "
     "invariant (heapq.heappop, comparing ints in C)."},
    {"time_heap_push", (PyCFunction)(void (*)(void))time_heap_push, METH_FASTCALL,
     "time_heap_push(heap, time, item, /)\n--\n\nAdd (time, item); time a 64-bit int."},
    {"time_heap_take", (PyCFunction)(void (*)(void))time_heap_take, METH_FASTCALL,
     "time_heap_take(heap, into, /)\n--\n\nTake out the earliest time: its items are appended "
     "to the list `into`, which is then sorted; returns the earliest time left, or None."},
    {"time_heap_pairs", time_heap_pairs, METH_O,
     "time_heap_pairs(heap, /)\n--\n\nEvery (time, item), in no particular order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_heap",
    "A heap of times on a list (heapq's push and pop, comparing ints in C) and a heap of "
    "(time, item) pairs in C: the heaps of streaming.state's TimeQueue.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__heap(void) {
    if (PyType_Ready(&TimeHeapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&TimeHeapType);
    if (PyModule_AddObject(m, "TimeHeap", (PyObject *)&TimeHeapType) < 0) {
        Py_DECREF(&TimeHeapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
