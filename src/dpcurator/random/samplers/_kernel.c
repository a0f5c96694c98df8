/* The float64 fast paths of dpcurator.random.samplers.inversion and .gaussian in one C pass each.
 *
 * See the module docstring below (KERNEL_DOC) for what each function computes and why its
 * decisions are those of the exact samplers (Canonne, Kamath & Steinke 2020, "The Discrete
 * Gaussian for Differential Privacy", arXiv:2004.00010). Built by setuptools at `pip install`
 * (pyproject.toml, ext-modules) with -ffp-contract=off: every float operation below is one
 * correctly rounded IEEE binary64 operation, in the order written (no fused multiply-add, no
 * reassociation, no vectorised libm).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

PyDoc_STRVAR(KERNEL_DOC,
"One-pass C kernels of the certified float tests of the exact samplers.\n"
"\n"
"Each function reads 64-bit uniform words and decides, for each, the event that the exact\n"
"samplers of Canonne, Kamath & Steinke 2020 (\"The Discrete Gaussian for Differential\n"
"Privacy\") decide from it: the inversion count K = max{k : U < c*exp(-k*s/t)} (invert), the\n"
"Bernoulli(exp(-x)) event U < exp(-x) (bexp, gaussian_log) and the same event against a\n"
"tabulated integer bracket of exp(-x) (gaussian_table). A word is decided only when a proven\n"
"margin makes the answer certain; the others are listed, and the caller decides them exactly\n"
"(dpcurator.random.samplers.inversion: more bits of U and integer bounds), in index order.\n"
"\n"
"Same decisions as the Python reference, word by word. The reference (inversion.\n"
"magnitude_of_word, bexp_of_word; the table test of gaussian) computes, per word, a float\n"
"from the library log of v + 1/2 and compares it with a margin: z = (offset - log)*inv, decided\n"
"when |z - floor(z) - 1/2| <= margin, value floor(z); or d = offset - log - x, true when\n"
"d > delta, false when d < -delta, else undecided. Its margins are proven (the module\n"
"inversion): they exceed the float error, so a decided word has the exact value.\n"
"(1) The kernels repeat these IEEE binary64 operations in the same order: int64 -> double\n"
"(round to nearest even, as numpy and Python), + 0.5, log, -, *, floor (an exact truncation\n"
"and step), fabs, comparisons. The build turns off contraction into fused multiply-adds, so\n"
"each result is the correctly rounded result of the same operation on the same operands: with\n"
"the same log, bit for bit the reference's float. The log is the C library's, which Python's\n"
"math.log calls too (and numpy on CPUs without AVX-512).\n"
"(2) The library log is called only near a margin. First, quick_log (a 128-entry table and a\n"
"degree-5 polynomial, within 2^-45 of ln; the library log is within 2^-44, checked against\n"
"mpmath by the tests) gives z' or d'. The two logs differ by less than 2^-43, so z' is within\n"
"inv*2^-42 of z and d' within 2^-42 + 2^-51|d| of d (the roundings of the few operations\n"
"after the log included); the kernel's slack, inv*2^-40 + 2^-50 (2^-40 + 2^-50|d'| for d'),\n"
"exceeds both. If |z' - floor(z') - 1/2| <= margin - slack, z lies in the same unit interval\n"
"as z' and within margin of its middle: the reference decides the same floor. If it is\n"
"> margin + slack, z is within the undecided band around an integer: the reference lists the\n"
"word. Likewise d' > delta + slack, d' < -delta - slack and |d'| < delta - slack each imply\n"
"the reference's answer. Otherwise (bands of width 2*slack around the margins: about\n"
"2^-38 of the words) the kernel computes the reference's float itself, as in (1).\n"
"(3) Integer comparisons (the small-word cut v < 2^39, the table brackets) are exact.\n"
"Hence every word gets the reference's decision, the undecided lists are the reference's, in\n"
"its order, and a seeded stream gives the same draws.");

#define CHECK_LEN(buf, n, size, name)                                            \
    if ((buf).len != (Py_ssize_t)(n) * (size)) {                                 \
        PyErr_SetString(PyExc_ValueError, name " has the wrong length");         \
        goto done;                                                               \
    }

/* Append index i to *list; -1 on error. */
static int note(PyObject *list, Py_ssize_t i) {
    PyObject *index = PyLong_FromSsize_t(i);
    if (index == NULL) return -1;
    int status = PyList_Append(list, index);
    Py_DECREF(index);
    return status;
}

/* The middle of U's interval [v/2^63, (v+1)/2^63) in units of 2^-63. */
static inline double middle(uint64_t v) { return (double)(int64_t)v + 0.5; }

/* quick_log: ln m for m in [2^39, 2^63] within 2^-45 (the library log is within 2^-44, so the
 * two differ by less than 2^-43, 8 times below SLACK_LOG). m = 2^e * f, f in [1, 2); with j
 * the top 7 bits of f's fraction, INV[j] = fl(1/c_j), c_j = 1 + (j + 1/2)/128, and
 * LOGC[j] = -log(INV[j]): ln m = e ln 2 + LOGC[j] + ln(1 + r), r = f * INV[j] - 1 (|r| <
 * 2^-7.9; the product rounds by 2^-53 relative and the subtraction is exact, Sterbenz),
 * ln(1 + r) by its Taylor polynomial to r^5 (truncation below |r|^6/6 < 2^-50). The table
 * (2^-53), e ln 2 and the two sums (below 2^-48 each: values below 44) add up to below 2^-46.
 * tests/test_samplers_kernel.py checks the bound against mpmath. */
#define TABLE_BITS 7
#define TABLE_SIZE (1 << TABLE_BITS)
static double INV[TABLE_SIZE], LOGC[TABLE_SIZE];
/* |quick_log - log| < 2^-43 (above): the z and d of a word from either log differ by less
 * than SLACK_LOG (times inv for z) plus roundings that SLACK_ABS and SLACK_REL cover. */
#define SLACK_LOG 0x1p-40
#define SLACK_ABS 0x1p-50

static void init_tables(void) {
    for (int j = 0; j < TABLE_SIZE; j++) {
        INV[j] = 1.0 / (1.0 + (j + 0.5) / TABLE_SIZE);
        LOGC[j] = -log(INV[j]);
    }
}

static inline double quick_log(double m) {
    uint64_t bits;
    memcpy(&bits, &m, sizeof bits);
    int e = (int)(bits >> 52) - 1023;
    int j = (int)((bits >> (52 - TABLE_BITS)) & (TABLE_SIZE - 1));
    uint64_t fbits = (bits & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1023) << 52);
    double f;
    memcpy(&f, &fbits, sizeof f);
    double r = f * INV[j] - 1.0;
    double p = r * (1.0 / 5.0) - 0.25;
    p = p * r + (1.0 / 3.0);
    p = p * r - 0.5;
    p = p * r;
    p = p * r + r;
    return (e * 0x1.62e42fefa39efp-1 + LOGC[j]) + p;
}

/* The reference's count: z = (minus_log) * inv, *whole = floor(z), returns |z - floor(z) - 0.5|.
 * floor without a library call: truncation is exact for |z| < 2^63 (here |z| <= 45 * 2^20,
 * inv <= 2^20), then one exact step down for negative z. */
static inline double count(double minus_log, double inv, double *whole) {
    double z = minus_log * inv;
    double k = (double)(int64_t)z;
    if (k > z) k = k - 1.0;
    *whole = k;
    double gap = z - k;
    gap = gap - 0.5;
    return fabs(gap);
}

PyDoc_STRVAR(invert_doc,
"invert(values, inv, offset, margin, small, two_sided) -> list of undecided indices\n\n"
"In place: each 64-bit word w of values with v = w >> 1 >= small, z = (offset - log(v + 0.5))\n"
"* inv and |z - floor(z) - 0.5| <= margin is replaced by the int64 floor(z) (negated when\n"
"two_sided and w is odd). Other words (v < small, or z too near an integer) stay and are listed.");

static PyObject *invert(PyObject *self, PyObject *args) {
    Py_buffer values = {0};
    double inv, offset, margin;
    unsigned long long small;
    int two_sided;
    PyObject *undecided = NULL;
    if (!PyArg_ParseTuple(args, "w*dddKp", &values, &inv, &offset, &margin, &small, &two_sided))
        return NULL;
    Py_ssize_t n = values.len / 8;
    CHECK_LEN(values, n, 8, "values");
    undecided = PyList_New(0);
    if (undecided == NULL) goto done;
    uint64_t *w = (uint64_t *)values.buf;
    double slack = inv * SLACK_LOG + SLACK_ABS, sure = margin - slack, unsure = margin + slack;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t word = w[i], v = word >> 1;
        if (v >= small) {
            double whole, gap = count(offset - quick_log(middle(v)), inv, &whole);
            if (!(gap <= sure) && !(gap > unsure))  /* near the margin: the reference's floats */
                gap = count(offset - log(middle(v)), inv, &whole);
            else if (gap > unsure)
                gap = margin + 1.0;
            if (gap <= margin) {
                int64_t k = (int64_t)whole;
                w[i] = (uint64_t)((two_sided && (word & 1)) ? -k : k);
                continue;
            }
        }
        if (note(undecided, i) < 0) {
            Py_CLEAR(undecided);
            goto done;
        }
    }
done:
    PyBuffer_Release(&values);
    return undecided;
}

/* The Bernoulli(exp(-x)) test of one word: 1 (U < e^-x), 0 (U > e^-x) or -1 (undecided). */
static inline int bexp_word(uint64_t word, double x, double offset, double delta,
                            uint64_t small) {
    uint64_t v = word >> 1;
    if (v < small) return -1;
    double d = offset - quick_log(middle(v));
    d = d - x;
    double slack = SLACK_LOG + fabs(d) * 0x1p-50;
    int yes = d > delta + slack, no = d < -delta - slack;
    if (yes | no) return yes; /* one branch, taken by nearly every word */
    if (fabs(d) < delta - slack) return -1;
    d = offset - log(middle(v)); /* near the margin: the reference's floats */
    d = d - x;
    if (fabs(d) <= delta) return -1;
    return d > delta;
}

/* Store one bexp_word result: accept[i] (0 when undecided) and the undecided index. */
static inline int store(PyObject *undecided, char *accept, Py_ssize_t i, int decision) {
    accept[i] = decision == 1;
    return decision < 0 ? note(undecided, i) : 0;
}

PyDoc_STRVAR(bexp_doc,
"bexp(words, x, offset, delta, small, accept) -> list of undecided indices\n\n"
"accept[i] = whether U_i < exp(-x[i]), decided when v = w >> 1 >= small and\n"
"d = offset - log(v + 0.5) - x[i] has |d| > delta (accept when d > delta); else listed.");

static PyObject *bexp(PyObject *self, PyObject *args) {
    Py_buffer words = {0}, x = {0}, accept = {0};
    double offset, delta;
    unsigned long long small;
    PyObject *undecided = NULL;
    if (!PyArg_ParseTuple(args, "y*y*ddKw*", &words, &x, &offset, &delta, &small, &accept))
        return NULL;
    Py_ssize_t n = words.len / 8;
    CHECK_LEN(words, n, 8, "words");
    CHECK_LEN(x, n, 8, "x");
    CHECK_LEN(accept, n, 1, "accept");
    undecided = PyList_New(0);
    if (undecided == NULL) goto done;
    const uint64_t *w = (const uint64_t *)words.buf;
    const double *xs = (const double *)x.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (store(undecided, accept.buf, i, bexp_word(w[i], xs[i], offset, delta, small)) < 0) {
            Py_CLEAR(undecided);
            goto done;
        }
    }
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&x);
    PyBuffer_Release(&accept);
    return undecided;
}

/* Keep proposal i (accepted, decision 1, or undecided, -1) at position *kept, in order; an
 * undecided one is listed as (i, position). -1 on error. */
static inline int settle(PyObject *undecided, int64_t *y, Py_ssize_t i, Py_ssize_t *kept,
                         int decision) {
    y[*kept] = y[i]; /* overwritten by the next kept one when rejected: no branch on it */
    if (decision < 0) {
        PyObject *pair = Py_BuildValue("(nn)", i, *kept);
        if (pair == NULL) return -1;
        int status = PyList_Append(undecided, pair);
        Py_DECREF(pair);
        if (status < 0) return -1;
    }
    *kept += decision != 0;
    return 0;
}

/* The result of the two Gaussian kernels: (kept, undecided) or NULL. */
static PyObject *kept_and_undecided(PyObject *undecided, Py_ssize_t kept) {
    if (undecided == NULL) return NULL;
    PyObject *result = Py_BuildValue("(nO)", kept, undecided);
    Py_DECREF(undecided);
    return result;
}

#define GAUSSIAN_RESULT                                                                \
    "In place, proposals[:kept] are the accepted and the undecided proposals in their\n" \
    "order; undecided lists (i, position) for each undecided word i (its proposal now at\n" \
    "position), in increasing i. Returns (kept, undecided)."

PyDoc_STRVAR(gaussian_log_doc,
"gaussian_log(proposals, words, mu, inv_sd, offset, delta, small) -> (kept, undecided)\n\n"
"The test of bexp for each proposal y, x = ((|y| - mu) * inv_sd)^2 computed in float64 (|y| <\n"
"2^53 is exact). " GAUSSIAN_RESULT);

static PyObject *gaussian_log(PyObject *self, PyObject *args) {
    Py_buffer proposals = {0}, words = {0};
    double mu, inv_sd, offset, delta;
    unsigned long long small;
    PyObject *undecided = NULL;
    Py_ssize_t kept = 0;
    if (!PyArg_ParseTuple(args, "w*y*ddddK", &proposals, &words, &mu, &inv_sd, &offset, &delta,
                          &small))
        return NULL;
    Py_ssize_t n = words.len / 8;
    CHECK_LEN(words, n, 8, "words");
    CHECK_LEN(proposals, n, 8, "proposals");
    undecided = PyList_New(0);
    if (undecided == NULL) goto done;
    const uint64_t *w = (const uint64_t *)words.buf;
    int64_t *y = (int64_t *)proposals.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        double a = (double)(y[i] < 0 ? -y[i] : y[i]);
        a = a - mu;
        a = a * inv_sd;
        if (settle(undecided, y, i, &kept, bexp_word(w[i], a * a, offset, delta, small)) < 0) {
            Py_CLEAR(undecided);
            goto done;
        }
    }
done:
    PyBuffer_Release(&proposals);
    PyBuffer_Release(&words);
    return kept_and_undecided(undecided, kept);
}

PyDoc_STRVAR(gaussian_table_doc,
"gaussian_table(proposals, words, lo, width) -> (kept, undecided)\n\n"
"With row r = min(|y|, len(lo) - 1) for each proposal y: accepted when words[i] < lo[r],\n"
"undecided when words[i] - lo[r] < width[r] (modulo 2^64: the word lies in the bracket of\n"
"exp(-x_r)), rejected otherwise. " GAUSSIAN_RESULT);

static PyObject *gaussian_table(PyObject *self, PyObject *args) {
    Py_buffer proposals = {0}, words = {0}, lo = {0}, width = {0};
    PyObject *undecided = NULL;
    Py_ssize_t kept = 0;
    if (!PyArg_ParseTuple(args, "w*y*y*y*", &proposals, &words, &lo, &width)) return NULL;
    Py_ssize_t n = words.len / 8, rows = lo.len / 8;
    CHECK_LEN(words, n, 8, "words");
    CHECK_LEN(proposals, n, 8, "proposals");
    CHECK_LEN(lo, rows, 8, "lo");
    CHECK_LEN(width, rows, 8, "width");
    if (rows < 1) {
        PyErr_SetString(PyExc_ValueError, "lo is empty");
        goto done;
    }
    undecided = PyList_New(0);
    if (undecided == NULL) goto done;
    const uint64_t *w = (const uint64_t *)words.buf;
    int64_t *y = (int64_t *)proposals.buf;
    const uint64_t *low = (const uint64_t *)lo.buf, *wide = (const uint64_t *)width.buf;
    uint64_t last = (uint64_t)rows - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t m = (uint64_t)(y[i] < 0 ? -y[i] : y[i]);
        uint64_t r = m < last ? m : last;
        int decision = w[i] < low[r];
        if (w[i] - low[r] < wide[r]) decision = -1;
        if (settle(undecided, y, i, &kept, decision) < 0) {
            Py_CLEAR(undecided);
            goto done;
        }
    }
done:
    PyBuffer_Release(&proposals);
    PyBuffer_Release(&words);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&width);
    return kept_and_undecided(undecided, kept);
}

PyDoc_STRVAR(quick_log_doc,
"quick_log(m) -> float\n\n"
"The kernels' first logarithm of m (a float in [2^39, 2^63]), within 2^-45 of ln m; a word\n"
"whose decision it leaves within the slack of a margin is decided with the C library's log.");

static PyObject *quick_log_py(PyObject *self, PyObject *arg) {
    double m = PyFloat_AsDouble(arg);
    if (m == -1.0 && PyErr_Occurred()) return NULL;
    if (!(m >= 0x1p39 && m <= 0x1p63)) {
        PyErr_SetString(PyExc_ValueError, "m must lie in [2**39, 2**63]");
        return NULL;
    }
    return PyFloat_FromDouble(quick_log(m));
}

static PyMethodDef methods[] = {
    {"quick_log", quick_log_py, METH_O, quick_log_doc},
    {"invert", invert, METH_VARARGS, invert_doc},
    {"bexp", bexp, METH_VARARGS, bexp_doc},
    {"gaussian_log", gaussian_log, METH_VARARGS, gaussian_log_doc},
    {"gaussian_table", gaussian_table, METH_VARARGS, gaussian_table_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", KERNEL_DOC, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) {
    init_tables();
    return PyModule_Create(&module);
}
