/* A JetStream snapshot's deliveries taken from the bytes a NATS server sent, in C.
 *
 * Why: read in Python, each delivery frame cost about 3.7 µs (finding its line, splitting it,
 * slicing the payload, a frame object, reading the stream sequence from its reply subject),
 * most of a snapshot's reading once the client library was out of the way
 * (docs/performance.md, forty-fifth round). This takes the common case only: a run of
 * complete `MSG`/`HMSG` frames of one subscription, each a message's own (not a status), with
 * a reply subject in one of the two JetStream acknowledgement forms and a stream sequence of
 * plain digits above the one before it. It stops, without taking it, at any other frame and
 * at an incomplete one; the general reader (streaming.sources.nats_wire.WireReader) then takes
 * or refuses that frame by the full rules, so this decides nothing the general reader would
 * decide otherwise (tests/test_source_nats_wire.py runs both on the same bytes). Built by
 * `python -m riskstream_tools.native_build` beside the mypyc modules and used only with them;
 * without it every frame goes through the general reader. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* What separates a control line's arguments: ASCII whitespace, as Python's bytes.split() has
 * it (the general reader splits so). */
static int is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0b' || c == '\x0c';
}

/* The first CRLF in [p, p + left), or NULL. */
static const char *find_crlf(const char *p, Py_ssize_t left) {
    const char *end = p + left;
    while (p < end) {
        const char *cr = memchr(p, '\r', (size_t)(end - p));
        if (cr == NULL || cr + 1 >= end)
            return NULL;
        if (cr[1] == '\n')
            return cr;
        p = cr + 1;
    }
    return NULL;
}

/* A run of digits as a non-negative number below 10^18 (nothing else: no sign, no
 * underscore, not empty); -1 otherwise. */
static long long plain_number(const char *s, Py_ssize_t n) {
    if (n <= 0 || n > 18)
        return -1;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* The stream sequence of a delivery's reply subject: `$JS.ACK.<stream>.<consumer>.
 * <delivered>.<stream seq>.<consumer seq>.<ns>.<pending>` (9 tokens) or the form with a
 * domain and an account hash (11, or 12 with a trailing token): the 6th or the 8th token.
 * -1 for anything else (the general reader then says why). */
static long long stream_sequence(const char *s, Py_ssize_t n) {
    if (n < 8 || memcmp(s, "$JS.ACK.", 8) != 0)
        return -1;
    const char *starts[16];
    Py_ssize_t lens[16];
    int tokens = 0;
    Py_ssize_t at = 0;
    while (at <= n) {
        const char *dot = memchr(s + at, '.', (size_t)(n - at));
        Py_ssize_t end = dot ? dot - s : n;
        if (tokens == 16)
            return -1;
        starts[tokens] = s + at;
        lens[tokens] = end - at;
        tokens++;
        at = end + 1;
    }
    if (tokens == 9)
        return plain_number(starts[5], lens[5]);
    if (tokens >= 11)
        return plain_number(starts[7], lens[7]);
    return -1;
}

static PyObject *deliveries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "deliveries(data, pos, sid, limit, lines, seqs) takes 6 arguments");
        return NULL;
    }
    PyObject *data = args[0], *sid = args[2], *lines = args[4], *seqs = args[5];
    if (!PyBytes_CheckExact(data) || !PyBytes_CheckExact(sid) || !PyList_CheckExact(lines)
        || !PyList_CheckExact(seqs)) {
        PyErr_SetString(PyExc_TypeError, "deliveries() takes bytes, int, bytes, int, list, list");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if ((pos == -1 || limit == -1) && PyErr_Occurred())
        return NULL;
    const char *d = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    const char *want_sid = PyBytes_AS_STRING(sid);
    Py_ssize_t sid_len = PyBytes_GET_SIZE(sid);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "deliveries(): pos outside the data");
        return NULL;
    }
    long long last = 0;
    Py_ssize_t have = PyList_GET_SIZE(seqs);
    if (have > 0) {
        int overflow = 0;
        last = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(seqs, have - 1), &overflow);
        if (last == -1 && PyErr_Occurred())
            return NULL;
        if (overflow)  /* past any sequence read here: the general reader judges the next */
            return PyLong_FromSsize_t(pos);
    }
    while (limit > 0) {
        const char *p = d + pos;
        Py_ssize_t left = n - pos;
        int headed;
        Py_ssize_t op;
        if (left >= 5 && memcmp(p, "HMSG", 4) == 0 && is_blank(p[4])) {
            headed = 1;
            op = 4;
        } else if (left >= 4 && memcmp(p, "MSG", 3) == 0 && is_blank(p[3])) {
            headed = 0;
            op = 3;
        } else {
            break;
        }
        const char *eol = find_crlf(p, left);
        if (eol == NULL)
            break;
        /* Its arguments: subject sid reply [header size] size. */
        const char *tok[6];
        Py_ssize_t tlen[6];
        int count = 0, too_many = 0;
        const char *q = p + op;
        while (q < eol) {
            while (q < eol && is_blank(*q))
                q++;
            if (q == eol)
                break;
            const char *t = q;
            while (q < eol && !is_blank(*q))
                q++;
            if (count == 6) {
                too_many = 1;
                break;
            }
            tok[count] = t;
            tlen[count] = q - t;
            count++;
        }
        if (too_many || count != (headed ? 5 : 4))
            break;  /* a delivery always names its reply subject */
        if (tlen[1] != sid_len || memcmp(tok[1], want_sid, (size_t)sid_len) != 0)
            break;
        long long size = plain_number(tok[count - 1], tlen[count - 1]);
        long long hsize = headed ? plain_number(tok[3], tlen[3]) : 0;
        if (size < 0 || hsize < 0 || hsize > size)
            break;
        Py_ssize_t start = (eol + 2) - d;
        if ((long long)(n - start) < size + 2)
            break;  /* not all here yet */
        Py_ssize_t stop = start + (Py_ssize_t)size;
        if (d[stop] != '\r' || d[stop + 1] != '\n')
            break;
        /* A status (`NATS/1.0 408 ...`) is not a message: the general reader ends the pull. */
        if (headed && hsize > 8 && d[start + 8] == ' ')
            break;
        long long seq = stream_sequence(tok[2], tlen[2]);
        if (seq <= last)
            break;
        PyObject *line = PyBytes_FromStringAndSize(d + start + hsize, (Py_ssize_t)(size - hsize));
        if (line == NULL)
            return NULL;
        int failed = PyList_Append(lines, line);
        Py_DECREF(line);
        if (failed)
            return NULL;
        PyObject *number = PyLong_FromLongLong(seq);
        if (number == NULL)
            return NULL;
        failed = PyList_Append(seqs, number);
        Py_DECREF(number);
        if (failed)
            return NULL;
        last = seq;
        pos = stop + 2;
        limit--;
    }
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"deliveries", (PyCFunction)(void (*)(void))deliveries, METH_FASTCALL,
     "deliveries(data, pos, sid, limit, lines, seqs, /)\n--\n\nFrom `pos`, take up to `limit` "
     "complete JetStream deliveries of subscription `sid` (not statuses, stream sequences "
     "rising past the last of `seqs`): payloads appended to `lines`, stream sequences to "
     "`seqs`. The position after the last one taken."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_wire",
    "A JetStream snapshot's deliveries taken from a NATS server's bytes in C "
    "(streaming.sources.nats_wire).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module_def); }
