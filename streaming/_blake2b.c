/* The project's content hash, blake2b with a 16-byte digest and no key, as 32 lowercase hex
 * digits: the same text `hashlib.blake2b(data, digest_size=16).hexdigest()` gives
 * (tests/test_hashing.py checks it across lengths and block boundaries).
 *
 * Why a function of our own: the hot path hashes several short texts per record (a payload, a
 * pair ID, a pair's and an outcome's JSON), and through hashlib each digest copies a hasher
 * object, calls three of its methods and, for a text, encodes it to bytes first. Measured with
 * callgrind over the join operator, that came to about a third of the digest's instructions,
 * besides the compression itself (docs/performance.md, twenty-ninth round). Here a digest is
 * one call: the state lives on the stack, a text is read as its UTF-8 bytes where it lies, and
 * the hex is written into the new string directly.
 *
 * BLAKE2b as RFC 7693 defines it; the counter's high word stays zero (inputs below 2**64
 * bytes). Part of the compiled core: built by `python -m riskstream_tools.native_build` beside
 * the mypyc modules, used only when the core is (streaming/hashing.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 128
#define OUT_BYTES 16
/* Inputs at least this long are hashed with the interpreter lock released, as hashlib does
 * (from 2 KiB there); the hot path's texts are far shorter. */
#define RELEASE_GIL_FROM (64 * 1024)

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL,
    0xa54ff53a5f1d36f1ULL, 0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL,
    0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, unsigned n) {
    return (x >> n) | (x << (64 - n));
}

/* Little-endian whatever the host's order (compilers make it one load on x86-64). */
static inline uint64_t load64(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

#define G(a, b, c, d, x, y)                      \
    do {                                         \
        v[a] = v[a] + v[b] + (x);                \
        v[d] = rotr64(v[d] ^ v[a], 32);          \
        v[c] = v[c] + v[d];                      \
        v[b] = rotr64(v[b] ^ v[c], 24);          \
        v[a] = v[a] + v[b] + (y);                \
        v[d] = rotr64(v[d] ^ v[a], 16);          \
        v[c] = v[c] + v[d];                      \
        v[b] = rotr64(v[b] ^ v[c], 63);          \
    } while (0)

#define ROUND(r)                                                  \
    do {                                                          \
        G(0, 4, 8, 12, m[SIGMA[r][0]], m[SIGMA[r][1]]);           \
        G(1, 5, 9, 13, m[SIGMA[r][2]], m[SIGMA[r][3]]);           \
        G(2, 6, 10, 14, m[SIGMA[r][4]], m[SIGMA[r][5]]);          \
        G(3, 7, 11, 15, m[SIGMA[r][6]], m[SIGMA[r][7]]);          \
        G(0, 5, 10, 15, m[SIGMA[r][8]], m[SIGMA[r][9]]);          \
        G(1, 6, 11, 12, m[SIGMA[r][10]], m[SIGMA[r][11]]);        \
        G(2, 7, 8, 13, m[SIGMA[r][12]], m[SIGMA[r][13]]);         \
        G(3, 4, 9, 14, m[SIGMA[r][14]], m[SIGMA[r][15]]);         \
    } while (0)

static void compress(uint64_t h[8], const uint8_t *block, uint64_t counter, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= counter;
    if (last) v[14] = ~v[14];
    /* Spelled out round by round: with the round a constant, each message word's index is
     * one, and the words stay in registers instead of being fetched through SIGMA (a loop over
     * the rounds ran slower than hashlib's own). */
    ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
    ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(10); ROUND(11);
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The first 16 bytes of the final state are the digest: h[0] and h[1], little-endian. */
static void blake2b_128(const uint8_t *in, size_t len, uint64_t out[2]) {
    uint64_t h[8];
    uint64_t counter = 0;
    uint8_t last[BLOCK];
    memcpy(h, IV, sizeof h);
    /* The parameter block's first word: digest length 16, key length 0, fanout 1, depth 1. */
    h[0] ^= 0x01010000ULL ^ OUT_BYTES;
    /* Every block but the last is compressed as it lies; the last (possibly the only one, and
     * empty for empty input) is zero-padded and flagged. */
    while (len > BLOCK) {
        counter += BLOCK;
        compress(h, in, counter, 0);
        in += BLOCK;
        len -= BLOCK;
    }
    memset(last, 0, sizeof last);
    if (len) memcpy(last, in, len);
    counter += len;
    compress(h, last, counter, 1);
    out[0] = h[0];
    out[1] = h[1];
}

/* Each byte's two hex digits, filled in when the module loads. */
static char HEX_PAIRS[256][2];

static PyObject *hex128(PyObject *module, PyObject *arg) {
    const char *data;
    Py_ssize_t len;
    Py_buffer view;
    int viewed = 0;
    uint64_t words[2];
    (void)module;
    if (PyBytes_CheckExact(arg)) {
        data = PyBytes_AS_STRING(arg);
        len = PyBytes_GET_SIZE(arg);
    } else if (PyUnicode_Check(arg)) {
        /* An ASCII text's UTF-8 is its own data: no copy. Any other text's UTF-8 is made once
         * and kept by the string (as `str.encode` would make it, failing the same way on a lone
         * surrogate). */
        data = PyUnicode_AsUTF8AndSize(arg, &len);
        if (data == NULL) return NULL;
    } else {
        if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
        data = (const char *)view.buf;
        len = view.len;
        viewed = 1;
    }
    if (len >= RELEASE_GIL_FROM) {
        Py_BEGIN_ALLOW_THREADS
        blake2b_128((const uint8_t *)data, (size_t)len, words);
        Py_END_ALLOW_THREADS
    } else {
        blake2b_128((const uint8_t *)data, (size_t)len, words);
    }
    if (viewed) PyBuffer_Release(&view);
    PyObject *text = PyUnicode_New(2 * OUT_BYTES, 127);
    if (text == NULL) return NULL;
    Py_UCS1 *hex = PyUnicode_1BYTE_DATA(text);
    for (int i = 0; i < OUT_BYTES; i++) {
        memcpy(hex + 2 * i, HEX_PAIRS[(words[i / 8] >> (8 * (i % 8))) & 0xff], 2);
    }
    return text;
}

static PyMethodDef methods[] = {
    {"hex128", hex128, METH_O,
     "hex128(data, /)\n--\n\nblake2b with a 16-byte digest of `data` (bytes, a bytes-like "
     "object, or a str as its UTF-8), as 32 lowercase hex digits."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_blake2b",
    "blake2b-128 as hex, the content hash of streaming.hashing, in one C call.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__blake2b(void) {
    static const char HEX[] = "0123456789abcdef";
    for (int b = 0; b < 256; b++) {
        HEX_PAIRS[b][0] = HEX[b >> 4];
        HEX_PAIRS[b][1] = HEX[b & 0xf];
    }
    return PyModule_Create(&module_def);
}
