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

PyDoc_STRVAR(KERNEL_DOC,
"One-pass C kernels of the certified float tests of the exact samplers.\n"
"\n"
"Each function reads 64-bit uniform words and decides, for each, the event that the exact\n"
"samplers of Canonne, Kamath & Steinke 2020 (\"The Discrete Gaussian for Differential\n"
"Privacy\") decide from it: the inversion count K = max{k : U < c*exp(-k*s/t)} (invert), the\n"
"Bernoulli(exp(-x)) event U < exp(-x) (bexp, gaussian_log) and the same event against a\n"
"tabulated integer bracket of exp(-x) (gaussian_table). A word is decided only when a proven\n"
"margin makes the answer certain; the others are returned as a list of indices, which the\n"
"caller decides exactly (dpcurator.random.samplers.inversion, more bits and integer bounds).\n"
"\n"
"Equivalence with the numpy formulation (and with the exact answer). The kernels evaluate the\n"
"same expressions as the Python reference (inversion.magnitude_of_word, bexp_of_word,\n"
"gaussian._Target) with the same IEEE binary64 operations in the same order: int64 -> double\n"
"(round to nearest even, as numpy and Python), + 0.5, log, -, *, floor (as an exact\n"
"truncation and step), fabs, comparisons;\n"
"the build turns off contraction into fused multiply-adds, so each result is the correctly\n"
"rounded value of the operation on the rounded operands, bit for bit the reference's. The\n"
"only operation not fixed by IEEE 754 is log: the kernel calls the C library's log, as\n"
"Python's math.log does (numpy also calls it on CPUs without AVX-512). Whichever log is used,\n"
"the decision is exact: the margins assume only an error below 2^-44 for arguments in\n"
"[2^39, 2^63] (checked against mpmath by tests/test_samplers_fast.py), and the margins (2^-36\n"
"on the log plus the width of U's interval, 2^-35 for Bernoulli) exceed the total error, so a\n"
"decided word has the value exact arithmetic gives it. Two logs that differ by a few units in\n"
"the last place can only disagree on WHETHER a word is decided when the computed quantity lies\n"
"within those few units of the margin (probability about 2^-48 per word); such a word is then\n"
"decided exactly instead, with the same value, and only the position of the extra bits read\n"
"from the stream moves. Integer comparisons (the small-word cut, the table brackets) are\n"
"exact. The undecided lists are in increasing index order, the order the reference resolves\n"
"them, so a seeded stream gives the same draws.");

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
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t word = w[i], v = word >> 1;
        if (v >= small) {
            double z = offset - log(middle(v));
            z = z * inv;
            /* floor(z), without a library call: truncation is exact for |z| < 2^63 (here
             * |z| <= 45 * 2^20, inv <= 2^20), then one exact step down for negative z */
            double whole = (double)(int64_t)z;
            if (whole > z) whole = whole - 1.0;
            double gap = z - whole;
            gap = gap - 0.5;
            if (fabs(gap) <= margin) {
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
    double d = offset - log(middle(v));
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
    if (decision == 0) return 0;
    y[*kept] = y[i];
    if (decision < 0) {
        PyObject *pair = Py_BuildValue("(nn)", i, *kept);
        if (pair == NULL) return -1;
        int status = PyList_Append(undecided, pair);
        Py_DECREF(pair);
        if (status < 0) return -1;
    }
    (*kept)++;
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
        int decision = w[i] - low[r] < wide[r] ? -1 : w[i] < low[r];
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

static PyMethodDef methods[] = {
    {"invert", invert, METH_VARARGS, invert_doc},
    {"bexp", bexp, METH_VARARGS, bexp_doc},
    {"gaussian_log", gaussian_log, METH_VARARGS, gaussian_log_doc},
    {"gaussian_table", gaussian_table, METH_VARARGS, gaussian_table_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", KERNEL_DOC, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
