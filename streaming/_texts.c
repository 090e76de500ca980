/* Texts the hot path reads or writes for every record, in C: an aware datetime's
 * microseconds since the epoch, an instant's canonical UTC text, the ID alphabet check, and a
 * text as a JSON string.
 *
 * Why: each was a handful of interpreter calls per field. An instant went through a datetime
 * subtraction and three attribute reads of the timedelta it made, its text through msgspec's
 * encoder, a slice and a decode, and the IDs were joined into one string for a regex search.
 * Measured per payment (interpreter, 200,000 calls each): 329 ns for one instant's
 * microseconds, 261 ns for its text, 374 ns for the join and the search; a payment has two
 * instants and three IDs. And a fact's IDs and times went to orjson and back to be quoted
 * (docs/performance.md, thirtieth round).
 *
 * Each function has a Python twin that gives the same answer (tests/test_texts.py compares
 * them on generated input): `streaming.contracts.canonical`, `streaming.timeutil` and
 * `streaming.operators.base` use these where the compiled core is in use, their own Python
 * otherwise. Built by
 * `python -m riskstream_tools.native_build` beside the mypyc modules. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

#define US_PER_S 1000000LL
#define US_PER_DAY 86400000000LL
/* Days from 0001-01-01 to 1970-01-01, and the last day of 9999 after the epoch: the range of
 * instants that have a four-digit year. */
#define FIRST_DAY (-719162LL)
#define LAST_DAY 2932896LL

/* Howard Hinnant's days_from_civil: days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Its inverse. */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* instant_us(dt): microseconds since 1970-01-01T00:00:00Z of an aware datetime. */
static PyObject *instant_us(PyObject *module, PyObject *dt) {
    if (!PyDateTime_Check(dt)) {
        PyErr_Format(PyExc_TypeError, "instant_us() takes a datetime, not %.100s",
                     Py_TYPE(dt)->tp_name);
        return NULL;
    }
    PyObject *tz = PyDateTime_DATE_GET_TZINFO(dt);  /* borrowed */
    if (tz == Py_None) {
        PyErr_SetString(PyExc_ValueError, "instant_us() takes an aware datetime");
        return NULL;
    }
    int64_t us = days_from_civil(PyDateTime_GET_YEAR(dt), PyDateTime_GET_MONTH(dt),
                                 PyDateTime_GET_DAY(dt)) * US_PER_DAY
                 + ((PyDateTime_DATE_GET_HOUR(dt) * 60LL + PyDateTime_DATE_GET_MINUTE(dt)) * 60LL
                    + PyDateTime_DATE_GET_SECOND(dt)) * US_PER_S
                 + PyDateTime_DATE_GET_MICROSECOND(dt);
    if (tz != PyDateTime_TimeZone_UTC) {
        /* Another zone (rare: producers write Z): its offset from UTC, as the zone says. */
        PyObject *off = PyObject_CallMethod(tz, "utcoffset", "O", dt);
        if (off == NULL)
            return NULL;
        if (off == Py_None) {
            Py_DECREF(off);
            PyErr_SetString(PyExc_ValueError, "instant_us() takes an aware datetime");
            return NULL;
        }
        if (!PyDelta_Check(off)) {
            Py_DECREF(off);
            PyErr_SetString(PyExc_TypeError, "utcoffset() did not return a timedelta");
            return NULL;
        }
        us -= PyDateTime_DELTA_GET_DAYS(off) * US_PER_DAY
              + PyDateTime_DELTA_GET_SECONDS(off) * US_PER_S
              + PyDateTime_DELTA_GET_MICROSECONDS(off);
        Py_DECREF(off);
    }
    return PyLong_FromLongLong(us);
}

static char TWO_DIGITS[100][2];

static inline char *put2(char *p, int v) {
    p[0] = TWO_DIGITS[v][0];
    p[1] = TWO_DIGITS[v][1];
    return p + 2;
}

/* iso_utc(us): "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" (the fraction only when it is not zero), or
 * None for an instant outside years 1-9999. */
static PyObject *iso_utc(PyObject *module, PyObject *arg) {
    int overflow = 0;
    long long us = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (us == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        Py_RETURN_NONE;
    /* Floor division: an instant before the epoch belongs to the day it falls in. */
    int64_t day = us / US_PER_DAY;
    int64_t rem = us % US_PER_DAY;
    if (rem < 0) {
        rem += US_PER_DAY;
        day -= 1;
    }
    if (day < FIRST_DAY || day > LAST_DAY)
        Py_RETURN_NONE;
    int64_t year;
    int month, mday;
    civil_from_days(day, &year, &month, &mday);
    int64_t secs = rem / US_PER_S;
    int micros = (int)(rem % US_PER_S);
    int len = micros ? 27 : 20;
    PyObject *out = PyUnicode_New(len, 127);
    if (out == NULL)
        return NULL;
    char *p = (char *)PyUnicode_1BYTE_DATA(out);
    p = put2(p, (int)(year / 100));
    p = put2(p, (int)(year % 100));
    *p++ = '-';
    p = put2(p, month);
    *p++ = '-';
    p = put2(p, mday);
    *p++ = 'T';
    p = put2(p, (int)(secs / 3600));
    *p++ = ':';
    p = put2(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = put2(p, (int)(secs % 60));
    if (micros) {
        *p++ = '.';
        p = put2(p, micros / 10000);
        p = put2(p, micros / 100 % 100);
        p = put2(p, micros % 100);
    }
    *p = 'Z';
    return out;
}

/* The ID alphabet (streaming.contracts.bounds.ID_CHARS): letters, digits and . _ ~ + = @ - */
static unsigned char ID_CHAR[128];

/* ids_in_alphabet(ids): whether every character of every text in the tuple is in the ID
 * alphabet (an empty text has none outside it). */
static PyObject *ids_in_alphabet(PyObject *module, PyObject *ids) {
    if (!PyTuple_Check(ids)) {
        PyErr_Format(PyExc_TypeError, "ids_in_alphabet() takes a tuple, not %.100s",
                     Py_TYPE(ids)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(ids);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(ids, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "ID %zd: expected str, not %.100s", i,
                         Py_TYPE(s)->tp_name);
            return NULL;
        }
        if (PyUnicode_READY(s) < 0)
            return NULL;
        if (!PyUnicode_IS_ASCII(s))
            Py_RETURN_FALSE;  /* every character outside ASCII is outside the alphabet */
        const unsigned char *c = PyUnicode_1BYTE_DATA(s);
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        for (Py_ssize_t k = 0; k < len; k++) {
            if (!ID_CHAR[c[k]])
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

/* json_quoted(s): the JSON string orjson writes for `s` when that is `s` in quotes (no
 * character below U+0020, no quote, no backslash, no lone surrogate, which orjson refuses);
 * None otherwise, for the caller to encode. */
static PyObject *json_quoted(PyObject *module, PyObject *s) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "json_quoted() takes a str, not %.100s",
                     Py_TYPE(s)->tp_name);
        return NULL;
    }
    if (PyUnicode_READY(s) < 0)
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *c = data;
        for (Py_ssize_t k = 0; k < len; k++) {
            if (c[k] < 0x20 || c[k] == '"' || c[k] == '\\')
                Py_RETURN_NONE;
        }
    } else {
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, k);
            if (ch < 0x20 || ch == '"' || ch == '\\' || (ch >= 0xD800 && ch <= 0xDFFF))
                Py_RETURN_NONE;
        }
    }
    PyObject *out = PyUnicode_New(len + 2, PyUnicode_MAX_CHAR_VALUE(s));
    if (out == NULL)
        return NULL;
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), 0, '"');
    if (PyUnicode_CopyCharacters(out, 1, s, 0, len) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), len + 1, '"');
    return out;
}

/* The source's guard before it trusts msgspec's skipping of a line's other fields
 * (streaming.sources.records.py_plain_lines, its Python twin, says why): lines no longer than
 * PLAIN_LONGEST bytes, all ASCII, with no exponent of three or more digits ("e" or "E" followed
 * by three characters each a digit or "+") and no run of PLAIN_DIGIT_RUN digits or "+".
 * The twin joins the block and translates it into a copy to search it: about a third of a
 * second per 1,000,000 lines. Here a line is read a word at a time for its ASCII, searched
 * for its "e"s with memchr, and probed for a long run every PLAIN_DIGIT_RUN - 1 bytes (any
 * such run covers a probe); a byte-by-byte pass cost 0.2 s per 1,000,000 lines, as its
 * branches follow the digits of the times (docs/performance.md, thirty-first round). A
 * newline joins the twin's lines and is neither a digit nor an "e", so nothing it finds spans
 * two lines, and judging line by line is the same. */
#define PLAIN_LONGEST 2048
#define PLAIN_DIGIT_RUN 210
static unsigned char DIGITISH[256];  /* a digit or "+": what the twin's shape writes as "0" */

static int line_is_plain(const unsigned char *c, Py_ssize_t len) {
    uint64_t seen = 0;
    Py_ssize_t k = 0;
    for (; k + 8 <= len; k += 8) {
        uint64_t word;
        memcpy(&word, c + k, 8);
        seen |= word;
    }
    for (; k < len; k++)
        seen |= c[k];
    if (seen & 0x8080808080808080ULL)
        return 0;
    const unsigned char *end = c + len;
    for (const char *e = "eE"; *e; e++) {
        const unsigned char *p = c;
        while ((p = memchr(p, *e, (size_t)(end - p))) != NULL) {
            if (end - p > 3 && DIGITISH[p[1]] && DIGITISH[p[2]] && DIGITISH[p[3]])
                return 0;
            p++;
        }
    }
    for (Py_ssize_t i = PLAIN_DIGIT_RUN - 2; i < len; i += PLAIN_DIGIT_RUN - 1) {
        if (!DIGITISH[c[i]])
            continue;
        Py_ssize_t lo = i, hi = i + 1;
        while (lo > 0 && DIGITISH[c[lo - 1]])
            lo--;
        while (hi < len && DIGITISH[c[hi]])
            hi++;
        if (hi - lo >= PLAIN_DIGIT_RUN)
            return 0;
    }
    return 1;
}

static PyObject *plain_lines(PyObject *module, PyObject *lines) {
    if (!PyList_Check(lines)) {
        PyErr_Format(PyExc_TypeError, "plain_lines() takes a list, not %.100s",
                     Py_TYPE(lines)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(lines);
    /* The twin judges the length of every line before it looks at any byte. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(line)) {
            PyErr_Format(PyExc_TypeError, "line %zd: expected bytes, not %.100s", i,
                         Py_TYPE(line)->tp_name);
            return NULL;
        }
        if (PyBytes_GET_SIZE(line) > PLAIN_LONGEST)
            Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!line_is_plain((const unsigned char *)PyBytes_AS_STRING(line),
                           PyBytes_GET_SIZE(line)))
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"instant_us", instant_us, METH_O,
     "instant_us(dt, /)\n--\n\nMicroseconds since the epoch of an aware datetime."},
    {"iso_utc", iso_utc, METH_O,
     "iso_utc(us, /)\n--\n\nThe canonical UTC text of an instant given in microseconds since "
     "the epoch, or None outside years 1-9999."},
    {"ids_in_alphabet", ids_in_alphabet, METH_O,
     "ids_in_alphabet(ids, /)\n--\n\nWhether every text of the tuple is in the ID alphabet."},
    {"json_quoted", json_quoted, METH_O,
     "json_quoted(s, /)\n--\n\nThe JSON string of `s` when it needs no escape, else None."},
    {"plain_lines", plain_lines, METH_O,
     "plain_lines(lines, /)\n--\n\nWhether a list of source lines is plain: short, ASCII, "
     "no exponent of three digits, no long run of digits."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_texts",
    "Texts of the hot path in C: instants, IDs, JSON strings and the source's plain-line guard "
    "(streaming.contracts.canonical, streaming.timeutil, streaming.operators.base, "
    "streaming.sources.records).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__texts(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    for (int v = 0; v < 100; v++) {
        TWO_DIGITS[v][0] = (char)('0' + v / 10);
        TWO_DIGITS[v][1] = (char)('0' + v % 10);
    }
    static const char PUNCT[] = "._~+=@-";
    for (int c = 0; c < 128; c++)
        ID_CHAR[c] = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    for (const char *p = PUNCT; *p; p++)
        ID_CHAR[(unsigned char)*p] = 1;
    for (int c = 0; c < 256; c++)
        DIGITISH[c] = (c >= '0' && c <= '9') || c == '+';
    return PyModule_Create(&module_def);
}
