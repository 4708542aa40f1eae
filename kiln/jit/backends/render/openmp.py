"""OpenMP teams for C kernels: the prelude helpers and the wrapper that splits a kernel's loops.

A kernel rendered by CLanguage.function is two C functions:

* ``NAME_range(kiln_o0, kiln_o1, kiln_j0, kiln_j1, <the kernel's parameters>)``: the
  kernel's loops over rows ``o`` in [kiln_o0, kiln_o1) and, for elementwise kernels,
  columns ``j`` in [kiln_j0, kiln_j1) (CLanguage.outer_loop / inner_loop spell those bounds);
* ``NAME(<the kernel's parameters>)``: asks ``kiln_team_enter`` how many threads to use.
  One: it calls the range function over everything, exactly the serial kernel. More: an
  OpenMP region in which each thread runs the range function over its own contiguous
  share (``kiln_share``): whole rows, or, for an elementwise kernel with fewer rows than
  about four per thread, a slice of columns (a multiple of 16 elements, so no two threads
  write one cache line). Every element or row is computed by exactly one thread, with the
  serial code, so results are bit for bit the serial ones. A kernel returning a count (a
  row kernel's flagged rows) returns the sum over threads. A kernel with a ``scratch``
  row (row kernels) gives each thread its own row from one block allocated per region;
  if that allocation fails the kernel runs serially.

``kiln_team`` points at process-wide settings shared by every loaded kernel library
(kiln/jit/backends/cpu/parallel.py writes them): [0] a flag held while a team runs, so
kernels called from several Python threads at once never run two teams (the second runs
serially: no oversubscription, no nested teams), [1] the thread count, [2] the fewest
elements (rows x columns) worth a team, [3] how many teams ran, [4] the size of the last
team. Until kiln points it there, a library uses its own copy that says "serial".
Without OpenMP (no ``-fopenmp``, see toolchain.py) the pragma is ignored and
``kiln_team_enter`` always answers one thread; so it does in a source that defines
``KILN_SERIAL_KERNELS`` first (a native plan with GEMMs on a multi-threaded BLAS, see
cpu/segcode.py).
"""
from __future__ import annotations

import re

TEAM_PRELUDE = r"""
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#define kiln_thread() omp_get_thread_num()
#define kiln_nthreads() omp_get_num_threads()
#else
#define kiln_thread() 0
#define kiln_nthreads() 1
#endif
/* process-wide team settings (see kiln/jit/backends/render/openmp.py); serial until kiln sets them */
static long long kiln_team_own[5] = {0, 1, 1LL << 62, 0, 0};
long long *kiln_team = kiln_team_own;

/* threads for a kernel over outer x inner elements (1: run serially); above 1 the caller holds
   the process-wide flag until kiln_team_leave */
static int kiln_team_enter(long long outer, long long inner, int split_inner) {
#if defined(_OPENMP) && !defined(KILN_SERIAL_KERNELS)
    long long n = kiln_team[1], units = split_inner ? outer * inner : outer;
    if (n < 2 || units < 2 || outer * inner < kiln_team[2] || omp_in_parallel()) return 1;
    long long idle = 0;
    if (!__atomic_compare_exchange_n(&kiln_team[0], &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 1;
    kiln_team[3] += 1;
    return (int)(n < units ? n : units);
#else
    (void)outer; (void)inner; (void)split_inner;
    return 1;
#endif
}

static void kiln_team_leave(void) { __atomic_store_n(&kiln_team[0], 0, __ATOMIC_RELEASE); }

/* this thread's share b = {o0, o1, j0, j1} of outer x inner: whole rows, or a slice of columns
   (multiples of 16 elements) when an elementwise kernel has under 4 rows per thread */
static void kiln_share(long long outer, long long inner, int split_inner, long long *b) {
    long long t = kiln_thread(), n = kiln_nthreads();
    if (t == 0) kiln_team[4] = n;
    if (!split_inner || outer >= 4 * n) {
        b[0] = outer * t / n; b[1] = outer * (t + 1) / n; b[2] = 0; b[3] = inner;
    } else {
        long long chunk = ((inner + n - 1) / n + 15) / 16 * 16;
        long long lo = chunk * t, hi = chunk * (t + 1);
        b[0] = 0; b[1] = outer; b[2] = lo < inner ? lo : inner; b[3] = hi < inner ? hi : inner;
    }
}
"""

_NAME = re.compile(r"(\w+)\s*$")
BOUNDS = ("kiln_o0", "kiln_o1", "kiln_j0", "kiln_j1")


def param_name(param: str) -> str:
    """The name a C parameter declaration declares ("const float *restrict in0" -> "in0")."""
    match = _NAME.search(param)
    if match is None:
        raise ValueError(f"cannot find the name in the C parameter {param!r}: expected a declaration such as "
                         "'const float *restrict in0'")
    return match.group(1)


def team_wrapper(name: str, ret: str, params: list[str], split_inner: bool, signature: str,
                 teams: bool = True) -> list[str]:
    """The lines of kernel `name` that runs NAME_range serially or on a team (module docstring).

    `signature` is the wrapper's opening line; the kernel's `outer` and `inner` parameters
    give the loop space, a parameter named `scratch` is a row of `inner` doubles per thread,
    and a non-void result is summed over threads. With `teams` False (a loop space known to
    stay below the team threshold) the wrapper only runs it serially: no OpenMP region to
    compile, which costs the C compiler more than the kernel itself.
    """
    names = [param_name(p) for p in params]
    if "outer" not in names or "inner" not in names:
        raise ValueError(f"kernel {name} needs parameters named outer and inner, got {names}")
    split = "1" if split_inner else "0"
    scratch = "scratch" in names
    returns = ret.strip() != "void"

    def call(bounds: tuple[str, ...], scratch_arg: str) -> str:
        args = [*bounds, *(scratch_arg if n == "scratch" else n for n in names)]
        return f"{name}_range({', '.join(args)})"

    serial = call(("0", "outer", "0", "inner"), "scratch")
    if not teams:
        return [signature, f"    {'return ' if returns else ''}{serial};", "}"]
    lines = [signature, f"    const int kiln_n = kiln_team_enter(outer, inner, {split});", "    if (kiln_n > 1) {"]
    ind = "        "
    if scratch:  # one 64-byte aligned row of inner doubles per thread
        lines += [f"{ind}const long long kiln_row = (inner * (long long)sizeof(double) + 63) / 64 * 64;",
                  f"{ind}char *kiln_pool = (char *)malloc((size_t)(kiln_row * kiln_n + 64));",
                  f"{ind}if (kiln_pool != NULL) {{"]
        ind += "    "
    if returns:
        lines.append(f"{ind}{ret} kiln_sum = 0;")
    reduction = " reduction(+:kiln_sum)" if returns else ""
    own = "(void *)(kiln_pool + (64 - (size_t)kiln_pool % 64) % 64 + kiln_row * kiln_thread())" if scratch else ""
    lines += [f"{ind}#pragma omp parallel num_threads(kiln_n){reduction}",
              f"{ind}{{",
              f"{ind}    long long kiln_b[4];",
              f"{ind}    kiln_share(outer, inner, {split}, kiln_b);",
              f"{ind}    {'kiln_sum += ' if returns else ''}"
              f"{call(('kiln_b[0]', 'kiln_b[1]', 'kiln_b[2]', 'kiln_b[3]'), own)};",
              f"{ind}}}",
              f"{ind}kiln_team_leave();"]
    if scratch:
        lines.append(f"{ind}free(kiln_pool);")
    lines.append(f"{ind}return{' kiln_sum' if returns else ''};")
    if scratch:
        lines += ["        }", "        kiln_team_leave();  /* no memory for the threads' scratch rows: serially */"]
    lines += ["    }", f"    {'return ' if returns else ''}{serial};", "}"]
    return lines


BLAS_TEAM_SYMBOL = "kiln_blas_team"

BLAS_TEAM_SOURCE = r"""/* generated by kiln: OpenBLAS's threaded calls on kiln's OpenMP team (cpu/blas_team.py) */
#include <stddef.h>
#include <pthread.h>
#include <omp.h>

typedef void (*kiln_blas_job)(int thread, void *job, int arg);

/* calls run on an OpenMP team, and calls whose team came up short and ran on fresh threads (tests read them) */
long long kiln_blas_team_calls = 0;
long long kiln_blas_thread_calls = 0;

/* one call at a time: OpenBLAS gives every caller the same per-thread buffers, indexed by job */
static pthread_mutex_t kiln_blas_lock = PTHREAD_MUTEX_INITIALIZER;

struct kiln_blas_worker { kiln_blas_job run; char *job; int thread; int arg; };

static void *kiln_blas_worker_main(void *p) {
    struct kiln_blas_worker *w = (struct kiln_blas_worker *)p;
    w->run(w->thread, w->job, w->arg);
    return NULL;
}

/* job 0 here, the others on threads of their own: OpenBLAS's jobs wait for one another, so they must all run at
   once (a job whose thread cannot start runs here after job 0, the best left to do) */
static void kiln_blas_on_threads(kiln_blas_job run, int jobs, size_t size, char *data, int arg) {
    pthread_t threads[jobs];
    struct kiln_blas_worker workers[jobs];
    int started[jobs];
    for (int i = 1; i < jobs; i++) {
        workers[i].run = run; workers[i].job = data + size * (size_t)i; workers[i].thread = i; workers[i].arg = arg;
        started[i] = pthread_create(&threads[i], NULL, kiln_blas_worker_main, &workers[i]) == 0;
    }
    run(0, data, arg);
    for (int i = 1; i < jobs; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else run(i, data + size * (size_t)i, arg);
    }
}

/* OpenBLAS's caller-managed threading callback: run jobs 0..jobs-1 at once, job i as thread i, and return when all
   are done (`sync` is always 1) */
void kiln_blas_team(int sync, kiln_blas_job run, int jobs, size_t size, void *data, int arg) {
    (void)sync;
    if (jobs < 1) return;
    pthread_mutex_lock(&kiln_blas_lock);
    int whole = 0;
    if (jobs == 1) {
        run(0, data, arg);
        whole = 1;
    } else if (!omp_in_parallel()) {
        #pragma omp parallel num_threads(jobs)
        {
            if (omp_get_num_threads() == jobs) {  /* else nobody starts: a short team would wait forever */
                run(omp_get_thread_num(), (char *)data + size * (size_t)omp_get_thread_num(), arg);
                if (omp_get_thread_num() == 0) whole = 1;
            }
        }
    }
    if (whole) {
        kiln_blas_team_calls++;
    } else {
        kiln_blas_on_threads(run, jobs, size, (char *)data, arg);
        kiln_blas_thread_calls++;
    }
    pthread_mutex_unlock(&kiln_blas_lock);
}
"""
"""The C of the library whose `BLAS_TEAM_SYMBOL` NumPy's OpenBLAS calls instead of waking its own threads."""
