/* tests/cuda/kernel_check.cpp: every CUDA kernel cddpc emits, run on the
 * CPU through emu.h, against its C twin from the same compilation
 * (DESIGN.md section 5, tier 4). Built by kernel_check.sh from
 *   kc_program.c  the emitted program.c (C kernels, plans, model),
 *   kc_cuda.cpp   the emitted all.cu under emu.h, with launch.txt's table,
 * this file and libcddprt.a.
 *
 * For each plan and each (nmax, n, step): every arena (param, grad, opt,
 * act, fix) gets random floats (uniform in [-1, 1]; parameters scaled to
 * +-1/sqrt(fan_in) as PyTorch initializes them, so that rounding in long
 * dot products is that of training), the dataset random bytes and labels, idx
 * random sample indices; grad, fix and stat are zeroed as the runtime does
 * before a plan. Then, kernel by kernel in plan order, the C kernel runs
 * on state A and the emulated CUDA kernel on state B (and, with two
 * orders, on B' with the threads of each block run in reverse order),
 * all starting from the same bytes; every float and stat double is
 * compared, |a-b| / max(1,|a|) <= tol; then A is copied over B so each
 * kernel is judged alone. Random initial contents catch an output one
 * side writes and the other does not. Last, the whole plan runs on both
 * without resynchronizing (one full training step through the CUDA
 * kernels against the CPU step) and the final arenas are compared.
 *
 * Usage: kernel_check [--sizes NMAX:N[:STEP],...] [--tol X] [--flips F] [--orders 1|2]
 *                     [--plan train|eval|both] [--seed N] [--cuda-src all.cu] [-v]
 * --cuda-src: also require rt_model.cuda_src (what the runtime gives
 * NVRTC) to be that file byte for byte.
 * Exit status 0 when every comparison is within tol. */
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "cddprt.h"
const rt_model *cddp_the_model(void);
int kc_cuda_count(void);
const char *kc_cuda_name(int i);
const char *kc_cuda_plan(int i);
int kc_cuda_bounds(int i);
void kc_cuda_geometry(int i, int nmax, unsigned grid[3], unsigned block[3], const long long **gmul,
                      const long long **gdiv, const unsigned **gfix);
int kc_cuda_launch(int i, const void *exec, int nmax, int reverse);
const char *kc_cuda_error(void);
unsigned long long kc_cuda_switches(void);
int kc_cuda_layout(size_t *out);
}

namespace {

double tol = 1e-5;
/* --flips F (low-precision models): the two targets round the same fp32
 * values to bf16/fp16, but their fp32 sums differ in the last bits, so a
 * value near a rounding midpoint may round apart: up to a fraction F of
 * an arena's values (and 2 more) may differ by more than tol, each by at
 * most flip_tol (two ulps of bf16). A kernel that did not round, or
 * rounded elsewhere, differs in most of its values. */
double flip_frac = 0, flip_tol = 1.0 / 64;
int verbose = 0;
uint64_t rng_state = 0x243f6a8885a308d3ull;

uint64_t rnd()
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
float frand() { return (float)((double)(rnd() >> 40) * (2.0 / 16777216.0) - 1.0); }

struct Dataset {
    std::vector<uint8_t> img, lab;
    std::vector<int32_t> idx;
    int64_t img_size = 0;
};

struct State {
    std::vector<float> act, fix, param, grad, opt;
    std::vector<double> stat;
    rt_exec e;
    void bind(const Dataset &d, int n, int nmax, float lr, int64_t step)
    {
        memset(&e, 0, sizeof e);
        e.n = n;
        e.nmax = nmax;
        e.act = act.data();
        e.fix = fix.data();
        e.param = param.data();
        e.grad = grad.data();
        e.opt = opt.data();
        e.stat = stat.data();
        e.img = d.img.data();
        e.lab = d.lab.data();
        e.idx = d.idx.data();
        e.img_size = d.img_size;
        e.lr = lr;
        e.step = step;
        e.nthreads = 1;
        /* dropout's streams see a rank and seed other than 0; SyncBatchNorm's
         * counts a world of 2 (its sums over the ranks are copies here: C
         * and CUDA compute the same thing either way) */
        e.rank = 1;
        e.world = 2;
        e.seed = 3407;
        e.scale = 1024.0f;      /* fp16 models' loss scale (others ignore it) */
    }
    void copy_from(const State &o)
    {
        act = o.act, fix = o.fix, param = o.param, grad = o.grad, opt = o.opt, stat = o.stat;
        e.act = act.data(), e.fix = fix.data(), e.param = param.data(), e.grad = grad.data();
        e.opt = opt.data(), e.stat = stat.data();
    }
};

/* Worst relative difference of one arena, and where it disagrees. */
struct Cmp {
    double worst = 0;
    int64_t worst_at = -1, bad = 0, flips = 0;
    int64_t first[5];
    int nfirst = 0;
};

bool tiny_bits(float v) { return v == 0.0f || std::fpclassify(v) == FP_SUBNORMAL; }

/* Floats: relative difference with a floor of 1 (an absolute difference
 * near zero). int32 values living in float arenas (labels) are small
 * integers whose bits read as subnormals: those must match exactly. */
template <class T> double diff1(T a, T b)
{
    if (std::isnan(a) || std::isnan(b))
        return std::isnan(a) && std::isnan(b) ? 0.0 : INFINITY;
    if (a == b)
        return 0.0;
    if (std::isinf(a) || std::isinf(b))
        return INFINITY;
    if constexpr (sizeof(T) == 4) {
        if (tiny_bits(a) && tiny_bits(b))
            return INFINITY; /* differing integers stored in a float slot */
    }
    return fabs((double)a - (double)b) / fmax(1.0, fabs((double)a));
}

template <class T> Cmp compare(const std::vector<T> &a, const std::vector<T> &b)
{
    Cmp c;
    for (size_t i = 0; i < a.size(); i++) {
        double d = diff1(a[i], b[i]);
        if (d > c.worst || (std::isinf(d) && c.worst_at < 0)) {
            c.worst = d;
            c.worst_at = (int64_t)i;
        }
        if (d > tol && flip_frac > 0 && d <= flip_tol) {
            c.flips++;
        } else if (d > tol) {
            if (c.nfirst < 5)
                c.first[c.nfirst++] = (int64_t)i;
            c.bad++;
        }
    }
    if (c.flips > (int64_t)(flip_frac * (double)a.size()) + 2)
        c.bad += c.flips;
    return c;
}

const char *arena_names[6] = {"act", "fix", "param", "grad", "opt", "stat"};

struct Verdict {
    double arena[6] = {0, 0, 0, 0, 0, 0};
    double worst = 0;
    const char *worst_arena = "-";
    bool ok = true;
};

/* Compare two states; print every disagreement (what, where, values). */
Verdict compare_states(const State &A, const State &B, const char *what, int nmax)
{
    Verdict v;
    Cmp c[6] = {compare(A.act, B.act),     compare(A.fix, B.fix),   compare(A.param, B.param),
                compare(A.grad, B.grad),   compare(A.opt, B.opt),   compare(A.stat, B.stat)};
    for (int k = 0; k < 6; k++) {
        v.arena[k] = c[k].worst;
        if (c[k].worst > v.worst || (c[k].worst == v.worst && c[k].worst_at >= 0 && v.worst_arena[0] == '-')) {
            v.worst = c[k].worst;
            v.worst_arena = arena_names[k];
        }
        if (!c[k].bad)
            continue;
        v.ok = false;
        printf("MISMATCH %s: %s: %" PRId64 " of %zu values differ by more than %g (worst %.3g)\n", what,
               arena_names[k], c[k].bad,
               k == 0 ? A.act.size() : k == 1 ? A.fix.size() : k == 2 ? A.param.size()
               : k == 3 ? A.grad.size() : k == 4 ? A.opt.size() : A.stat.size(),
               tol, c[k].worst);
        for (int j = 0; j < c[k].nfirst; j++) {
            int64_t o = c[k].first[j];
            if (k == 5) {
                printf("    stat[%" PRId64 "]: C %.9g  CUDA %.9g\n", o, A.stat[o], B.stat[o]);
                continue;
            }
            const std::vector<float> &a = k == 0 ? A.act : k == 1 ? A.fix : k == 2 ? A.param
                                        : k == 3 ? A.grad : A.opt;
            const std::vector<float> &b = k == 0 ? B.act : k == 1 ? B.fix : k == 2 ? B.param
                                        : k == 3 ? B.grad : B.opt;
            int32_t ia, ib;
            memcpy(&ia, &a[o], 4);
            memcpy(&ib, &b[o], 4);
            if (k == 0)
                printf("    act[%" PRId64 "] (= %" PRId64 "*nmax + %" PRId64 "): C %.9g  CUDA %.9g  (as int32: %d %d)\n",
                       o, o / nmax, o % nmax, a[o], b[o], ia, ib);
            else
                printf("    %s[%" PRId64 "]: C %.9g  CUDA %.9g\n", arena_names[k], o, a[o], b[o]);
        }
    }
    return v;
}

struct Size {
    int nmax, n;
    int64_t step;
};

struct KernelStat {
    std::string name;
    double worst = 0;
    const char *arena = "-";
    bool ok = true;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
};

void fill_random(std::vector<float> &v)
{
    for (auto &x : v)
        x = frand();
}

bool check_layout()
{
    size_t cu[32];
    int k = kc_cuda_layout(cu);
    size_t c[] = {sizeof(rt_exec),          offsetof(rt_exec, n),        offsetof(rt_exec, nmax),
                  offsetof(rt_exec, act),   offsetof(rt_exec, fix),      offsetof(rt_exec, param),
                  offsetof(rt_exec, grad),  offsetof(rt_exec, opt),      offsetof(rt_exec, stat),
                  offsetof(rt_exec, img),   offsetof(rt_exec, lab),      offsetof(rt_exec, idx),
                  offsetof(rt_exec, img_size), offsetof(rt_exec, lr),    offsetof(rt_exec, step),
                  offsetof(rt_exec, nthreads), offsetof(rt_exec, rank), offsetof(rt_exec, world),
                  offsetof(rt_exec, seed),  offsetof(rt_exec, scale),    offsetof(rt_exec, found_inf)};
    const char *names[] = {"sizeof", "n", "nmax", "act", "fix", "param", "grad", "opt",
                           "stat", "img", "lab", "idx", "img_size", "lr", "step", "nthreads",
                           "rank", "world", "seed", "scale", "found_inf"};
    bool ok = k == (int)(sizeof c / sizeof c[0]);
    for (int i = 0; ok && i < k; i++)
        if (cu[i] != c[i]) {
            printf("FAIL rt_exec layout: %s is %zu in the CUDA prelude, %zu in cddprt.h\n", names[i], cu[i], c[i]);
            ok = false;
        }
    if (ok)
        printf("rt_exec layout of the CUDA prelude matches cddprt.h (%zu bytes)\n", c[0]);
    return ok;
}

/* The CUDA kernels of one plan, in plan order, matched by name; also the
 * launch tables compiled into program.c, when it has them. */
bool map_plan(const rt_plan &p, const char *which, std::vector<int> &cu)
{
    bool ok = true;
    std::vector<int> listed;
    for (int i = 0; i < kc_cuda_count(); i++)
        if (strstr(kc_cuda_plan(i), which) == kc_cuda_plan(i) || strstr(which, kc_cuda_plan(i)) == which)
            listed.push_back(i);
    cu.assign(p.nk, -1);
    for (int k = 0; k < p.nk; k++) {
        for (int i = 0; i < kc_cuda_count(); i++)
            if (!strcmp(kc_cuda_name(i), p.k[k].name))
                cu[k] = i;
        if (cu[k] < 0) {
            printf("FAIL %s kernel %s has no CUDA twin in launch.txt\n", which, p.k[k].name);
            ok = false;
        } else if (k < (int)listed.size() && listed[k] != cu[k]) {
            printf("FAIL %s kernel %d is %s in the C plan but %s in launch.txt\n", which, k, p.k[k].name,
                   kc_cuda_name(listed[k]));
            ok = false;
        }
    }
    if ((int)listed.size() != p.nk) {
        printf("FAIL %s plan has %d C kernels, launch.txt lists %zu for it\n", which, p.nk, listed.size());
        ok = false;
    }
    if (p.cu) {
        for (int k = 0; ok && k < p.nk; k++) {
            const rt_cuda_launch &L = p.cu[k];
            unsigned g[3], b[3];
            const long long *gm, *gd;
            const unsigned *gf;
            kc_cuda_geometry(cu[k], 1, g, b, &gm, &gd, &gf);
            bool same = !strcmp(L.name, p.k[k].name);
            for (int d = 0; d < 3; d++)
                same = same && L.block[d] == b[d] && L.gdiv[d] == gd[d] && L.gmul[d] == gm[d] &&
                       (gd[d] != 0 || L.gfix[d] == gf[d]);
            if (!same) {
                printf("FAIL %s kernel %s: the launch table in program.c disagrees with launch.txt\n", which,
                       p.k[k].name);
                ok = false;
            }
        }
        if (ok)
            printf("%s: program.c's rt_cuda_launch table agrees with launch.txt\n", which);
    }
    for (int k = 0; ok && k < p.nk; k++) {
        unsigned g[3], b[3];
        kc_cuda_geometry(cu[k], 1, g, b, nullptr, nullptr, nullptr);
        unsigned threads = b[0] * b[1] * b[2];
        int lb = kc_cuda_bounds(cu[k]);
        if (lb > 0 && threads > (unsigned)lb) {
            printf("FAIL %s: block of %u threads exceeds __launch_bounds__(%d): the launch would fail\n",
                   p.k[k].name, threads, lb);
            ok = false;
        }
    }
    return ok;
}

/* One plan at one size: lockstep kernel by kernel, then the free run. */
bool run_plan(const rt_model *m, const rt_plan &p, const char *which, const std::vector<int> &cu, Size sz,
              int orders, std::vector<KernelStat> &ks, Verdict &whole)
{
    const int nmax = sz.nmax, n = sz.n;
    const int64_t units = std::max(m->train.act_units, m->eval.act_units);
    const int64_t fixn = std::max<int64_t>(1, std::max(m->train.fix_floats, m->eval.fix_floats));
    const int nstat = std::max(1, std::max(m->train.nstat, m->eval.nstat));
    Dataset d;
    d.img_size = (int64_t)m->in_c * m->in_h * m->in_w;
    const int nsamp = nmax + 13;
    d.img.resize((size_t)(nsamp * d.img_size));
    d.lab.resize(nsamp);
    d.idx.resize(nmax);
    for (auto &x : d.img)
        x = (uint8_t)(rnd() >> 56);
    for (auto &x : d.lab)
        x = (uint8_t)(rnd() % (uint64_t)m->nclass);
    for (auto &x : d.idx)
        x = (int32_t)(rnd() % (uint64_t)nsamp);

    State A;
    A.act.resize((size_t)(units * nmax));
    A.fix.resize((size_t)fixn);
    A.param.resize((size_t)m->param_floats);
    A.grad.resize((size_t)m->param_floats);
    A.opt.resize((size_t)std::max<int64_t>(1, m->opt_floats));
    A.stat.assign((size_t)nstat, 0.0);
    fill_random(A.act);
    fill_random(A.fix);
    /* parameters at PyTorch's init scale (uniform +-1/sqrt(fan_in)), so a
     * dot product over K terms has the magnitude and rounding of training,
     * not sums of K unit-sized terms; padding between them stays +-1 */
    fill_random(A.param);
    for (int i = 0; i < m->nparam; i++) {
        const rt_param &q = m->params[i];
        const float bound = q.fan_in > 0 ? 1.0f / sqrtf((float)q.fan_in) : 1.0f;
        for (int64_t j = 0; j < q.numel; j++) {
            float &v = A.param[(size_t)(q.off + j)];
            v *= bound;
            /* buffers hold what they would in training: a variance (init
             * one) is positive -- a negative one would make both sides NaN,
             * which compares equal and checks nothing -- a counter counts */
            const int fl = rt_param_flags(m, i);
            if ((fl & RT_PARAM_BUFFER) && (fl & RT_PARAM_I64))
                v = (float)(rnd() % 1000);
            else if ((fl & RT_PARAM_BUFFER) && q.init == RT_INIT_ONE)
                v = 0.5f + fabsf(v);
        }
    }
    fill_random(A.opt);
    fill_random(A.grad);
    /* the runtime zeroes grad, fix and stat before a plan (cddprt.h, CUDA device) */
    std::fill(A.grad.begin(), A.grad.end(), 0.0f);
    std::fill(A.fix.begin(), A.fix.end(), 0.0f);
    A.bind(d, n, nmax, m->lr, sz.step);
    State B = A, R = A, A0 = A;
    B.bind(d, n, nmax, m->lr, sz.step);
    R.bind(d, n, nmax, m->lr, sz.step);
    B.copy_from(A);
    R.copy_from(A);
    A0.bind(d, n, nmax, m->lr, sz.step);
    A0.copy_from(A);

    bool ok = true;
    char what[256];
    for (int k = 0; k < p.nk; k++) {
        const int c = cu[k];
        p.k[k].fn(&A.e);
        if (kc_cuda_launch(c, &B.e, nmax, 0) != 0) {
            printf("FAIL %s nmax %d n %d: emulated launch failed: %s\n", p.k[k].name, nmax, n, kc_cuda_error());
            ok = ks[k].ok = false;
            B.copy_from(A);
            R.copy_from(A);
            continue;
        }
        snprintf(what, sizeof what, "%s (nmax %d, n %d, step %" PRId64 ")", p.k[k].name, nmax, n, sz.step);
        Verdict v = compare_states(A, B, what, nmax);
        if (orders > 1) {
            if (kc_cuda_launch(c, &R.e, nmax, 1) != 0) {
                printf("FAIL %s nmax %d n %d: emulated launch (reverse thread order) failed: %s\n", p.k[k].name,
                       nmax, n, kc_cuda_error());
                v.ok = false;
            } else {
                snprintf(what, sizeof what, "%s (nmax %d, n %d, step %" PRId64 ", threads in reverse order)",
                         p.k[k].name, nmax, n, sz.step);
                Verdict r = compare_states(A, R, what, nmax);
                if (r.worst > v.worst)
                    v.worst = r.worst, v.worst_arena = r.worst_arena;
                v.ok = v.ok && r.ok;
            }
        }
        if (verbose)
            printf("  %-44s nmax %3d n %3d: max rel diff %.3g (%s)\n", p.k[k].name, nmax, n, v.worst, v.worst_arena);
        if (v.worst > ks[k].worst)
            ks[k].worst = v.worst, ks[k].arena = v.worst_arena;
        ks[k].ok = ks[k].ok && v.ok;
        ok = ok && v.ok;
        B.copy_from(A);
        R.copy_from(A);
    }

    /* the whole plan without resynchronizing */
    State F = A0;
    F.bind(d, n, nmax, m->lr, sz.step);
    F.copy_from(A0);
    for (int k = 0; k < p.nk; k++)
        p.k[k].fn(&A0.e);
    for (int k = 0; k < p.nk; k++)
        if (kc_cuda_launch(cu[k], &F.e, nmax, 0) != 0) {
            printf("FAIL %s full run, %s: %s\n", which, p.k[k].name, kc_cuda_error());
            return false;
        }
    snprintf(what, sizeof what, "whole %s plan (nmax %d, n %d, step %" PRId64 ")", which, nmax, n, sz.step);
    whole = compare_states(A0, F, what, nmax);
    return ok && whole.ok;
}

bool parse_sizes(const char *s, std::vector<Size> &out)
{
    out.clear();
    while (*s) {
        Size z{0, 0, 0};
        long long st = 0;
        int used = 0;
        if (sscanf(s, "%d:%d%n", &z.nmax, &z.n, &used) < 2)
            return false;
        s += used;
        if (*s == ':') {
            if (sscanf(s, ":%lld%n", &st, &used) < 1)
                return false;
            s += used;
        }
        z.step = st;
        if (z.nmax < 1 || z.n < 1 || z.n > z.nmax)
            return false;
        out.push_back(z);
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return !out.empty();
}

} // namespace

int main(int argc, char **argv)
{
    std::vector<Size> sizes = {{19, 19, 0}, {64, 37, 3}, {70, 70, 1}};
    int orders = 2;
    const char *plans = "both";
    const char *cuda_src_file = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            if (!parse_sizes(argv[++i], sizes)) {
                fprintf(stderr, "kernel_check: --sizes wants NMAX:N[:STEP],... with 1 <= N <= NMAX\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--tol") && i + 1 < argc)
            tol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--flips") && i + 1 < argc)
            flip_frac = atof(argv[++i]);
        else if (!strcmp(argv[i], "--orders") && i + 1 < argc)
            orders = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plan") && i + 1 < argc)
            plans = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            rng_state = strtoull(argv[++i], nullptr, 0);
        else if (!strcmp(argv[i], "--cuda-src") && i + 1 < argc)
            cuda_src_file = argv[++i];
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--sizes NMAX:N[:STEP],...] [--tol X] [--orders 1|2] "
                            "[--plan train|eval|both] [--seed N] [--cuda-src FILE] [-v]\n", argv[0]);
            return 2;
        }
    }
    const rt_model *m = cddp_the_model();
    printf("model %s (%s): %lld parameter floats, %d train + %d eval kernels, tol %g\n", m->name, m->source,
           (long long)m->param_floats, m->train.nk, m->eval.nk, tol);
    bool ok = check_layout();
    if (cuda_src_file) {
        /* what the runtime hands NVRTC must be what was checked here */
        FILE *f = fopen(cuda_src_file, "rb");
        std::string text;
        char buf[65536];
        size_t got;
        while (f && (got = fread(buf, 1, sizeof buf, f)) > 0)
            text.append(buf, got);
        if (f)
            fclose(f);
        if (!f)
            printf("FAIL cannot read %s\n", cuda_src_file), ok = false;
        else if (!m->cuda_src)
            printf("FAIL program.c has no cuda_src (rt_model.cuda_src is NULL)\n"), ok = false;
        else if (text != m->cuda_src)
            printf("FAIL rt_model.cuda_src in program.c differs from %s\n", cuda_src_file), ok = false;
        else
            printf("rt_model.cuda_src in program.c is %s byte for byte (%zu bytes)\n", cuda_src_file, text.size());
    }
    int total_fail = 0;
    for (int pi = 0; pi < 2; pi++) {
        const char *which = pi == 0 ? "train" : "eval";
        if (strcmp(plans, "both") && strcmp(plans, which))
            continue;
        const rt_plan &p = pi == 0 ? m->train : m->eval;
        std::vector<int> cu;
        if (!map_plan(p, which, cu)) {
            ok = false;
            continue;
        }
        std::vector<KernelStat> ks(p.nk);
        for (int k = 0; k < p.nk; k++)
            ks[k].name = p.k[k].name;
        std::vector<Verdict> whole(sizes.size());
        bool pok = true;
        for (size_t s = 0; s < sizes.size(); s++)
            pok = run_plan(m, p, which, cu, sizes[s], orders, ks, whole[s]) && pok;
        printf("\n%s plan: max relative difference per kernel over nmax:n:step", which);
        for (auto &z : sizes)
            printf(" %d:%d:%lld", z.nmax, z.n, (long long)z.step);
        printf("%s\n", orders > 1 ? ", both thread orders" : "");
        printf("  %-44s %-22s %-16s %10s %s\n", "kernel", "grid@nmax=" , "block", "max diff", "arena");
        for (int k = 0; k < p.nk; k++) {
            unsigned g[3], b[3];
            kc_cuda_geometry(cu[k], sizes.back().nmax, g, b, nullptr, nullptr, nullptr);
            char gs[40], bs[40];
            snprintf(gs, sizeof gs, "(%u,%u,%u)@%d", g[0], g[1], g[2], sizes.back().nmax);
            snprintf(bs, sizeof bs, "(%u,%u,%u)", b[0], b[1], b[2]);
            printf("  %-44s %-22s %-16s %10.3g %-5s %s\n", ks[k].name.c_str(), gs, bs, ks[k].worst, ks[k].arena,
                   ks[k].ok ? "ok" : "FAIL");
            total_fail += !ks[k].ok;
        }
        printf("  whole %s plan from one state, no resync: max rel diff per arena\n", which);
        for (size_t s = 0; s < sizes.size(); s++) {
            const Verdict &v = whole[s];
            printf("    nmax %3d n %3d step %lld: param %.3g  opt %.3g  grad %.3g  stat %.3g  act %.3g  fix %.3g  %s\n",
                   sizes[s].nmax, sizes[s].n, (long long)sizes[s].step, v.arena[2], v.arena[4], v.arena[3],
                   v.arena[5], v.arena[0], v.arena[1], v.ok ? "ok" : "FAIL");
        }
        ok = ok && pok;
    }
    printf("\n%s: %s (%d kernels failed, %llu emulated context switches)\n", m->name, ok ? "PASS" : "FAIL",
           total_fail, kc_cuda_switches());
    return ok ? 0 : 1;
}
