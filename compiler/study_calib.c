/* study_calib.c: this machine's peak FLOP rate and memory bandwidth for
 * `cddpc study --kernels`' roofline. The measurement is compiled as the
 * programs are (CDDPC_CC or cc, -O3 -march=native -fopenmp) and run with
 * their thread count, so its peaks are the ones their kernels could reach:
 *   - bandwidth: the STREAM triad a = b + s c over three 64 MiB arrays
 *     (12 bytes an element), best of 5;
 *   - FLOP rate: 64 independent multiply-adds per thread per iteration,
 *     which the C compiler turns into vector FMAs, best of 3.
 * --peak-gflops and --peak-gbs replace either. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "study.h"

static const char calib_src[] =
    "#include <omp.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n"
    "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }\n"
    "int main(int argc, char **argv) {\n"
    "    if (argc > 1 && atoi(argv[1]) > 0) omp_set_num_threads(atoi(argv[1]));\n"
    "    const long n = 1L << 24;\n"
    "    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);\n"
    "    if (!a || !b || !c) return 1;\n"
    "    #pragma omp parallel for schedule(static)\n"
    "    for (long i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;\n"
    "    double best_bw = 1e30;\n"
    "    for (int r = 0; r < 5; r++) {\n"
    "        double t = now();\n"
    "        #pragma omp parallel for schedule(static)\n"
    "        for (long i = 0; i < n; i++) a[i] = b[i] + 1.5f * c[i];\n"
    "        t = now() - t; if (t < best_bw) best_bw = t;\n"
    "    }\n"
    "    const long iters = 2000000; double best_fl = 1e30; float sink = 0; int nt = 1;\n"
    "    for (int r = 0; r < 3; r++) {\n"
    "        double t = now();\n"
    "        #pragma omp parallel reduction(+ : sink)\n"
    "        {\n"
    "            float x[64];\n"
    "            for (int k = 0; k < 64; k++) x[k] = (float)k;\n"
    "            for (long it = 0; it < iters; it++)\n"
    "                for (int k = 0; k < 64; k++) x[k] = x[k] * 0.9999999f + 1e-7f;\n"
    "            for (int k = 0; k < 64; k++) sink += x[k];\n"
    "            #pragma omp single\n"
    "            nt = omp_get_num_threads();\n"
    "        }\n"
    "        t = now() - t; if (t < best_fl) best_fl = t;\n"
    "    }\n"
    "    printf(\"%.3f %.3f %d %g\\n\", 2.0 * 64 * iters * nt / best_fl / 1e9, 12.0 * n / best_bw / 1e9, nt, sink + a[n / 2]);\n"
    "    return 0;\n"
    "}\n";

int study_calibrate(const char *dir, const char *threads, double *gflops, double *gbs)
{
    const char *src = util_fmt("%s/calibrate.c", dir), *exe = util_fmt("%s/calibrate", dir),
               *res = util_fmt("%s/calibrate.txt", dir);
    FILE *f = fopen(src, "w");
    if (!f || fputs(calib_src, f) < 0 || fclose(f) != 0)
        return -1;
    const char *cc = getenv("CDDPC_CC");
    char *cmd = util_fmt("%s -std=gnu11 -O3 -march=native -fopenmp -ffp-contract=fast '%s' -o '%s' && '%s' %s > '%s'",
                         cc && *cc ? cc : "cc", src, exe, exe, threads ? threads : "0", res);
    fflush(NULL);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    f = fopen(res, "r");
    double gf = 0, bw = 0;
    int ok = f && fscanf(f, "%lf %lf", &gf, &bw) == 2;
    if (f)
        fclose(f);
    if (!ok || !(gf > 0) || !(bw > 0))
        return -1;
    if (*gflops <= 0)
        *gflops = gf;
    if (*gbs <= 0)
        *gbs = bw;
    return 0;
}
