/* tests/cuda/emu.h: run CUDA C kernels on the CPU, as a test tool.
 *
 * The source cddpc emits for NVRTC is also compiled by the host C++
 * compiler with this header in front of it, and run on small shapes
 * against the C backend (DESIGN.md section 5, tier 4). What a kernel's
 * indexing computes is then known before a GPU ever runs it.
 *
 * Model of execution:
 *   - the blocks of a grid run one after the other, x fastest;
 *   - the threads of a block are coroutines, each on its own small stack
 *     (EMU_STACK bytes plus a guard page, allocated once and reused),
 *     switched by a few instructions on x86-64 (emu_ctx_swap: the
 *     callee-saved registers and the FP control words; glibc's
 *     swapcontext makes a sigprocmask system call per switch, which was
 *     over half of an emulated training step) and by ucontext elsewhere. A thread runs until it reaches a barrier or returns; then
 *     the next one runs. __syncthreads() completes when every thread of
 *     the block has reached it; a warp operation (__shfl_*_sync,
 *     __syncwarp, __ballot_sync, ...) when every lane of its mask has.
 *   - __shared__ is `static` in a section of its own: one copy, shared by
 *     all coroutines of the block, which is right because blocks never
 *     overlap in time. Before each block the whole section is filled with
 *     0xff bytes (NaN as float, -1 as int) so a kernel that reads shared
 *     memory it did not write in this block gets garbage, as on a GPU.
 *   - atomics are plain read-modify-writes: there is one OS thread.
 *   - threadIdx, blockIdx, blockDim, gridDim are globals the scheduler
 *     sets before it switches into a thread.
 *
 * Misuse that hangs or is undefined on a GPU is reported instead: a thread
 * that returns while others wait at __syncthreads (or reaches it after one
 * returned), warps whose lanes wait at different barriers (deadlock), a
 * shuffle mask that names absent or exited lanes, a shuffle that reads a
 * lane outside its mask, a bad launch geometry. emu_launch() then prints
 * "emu: KERNEL block (x,y,z): ..." to stderr, keeps the message in
 * emu_last_error(), abandons the block and returns -1.
 *
 * Data races: between barriers the threads of a block run one after the
 * other in ascending linear id, or descending after emu_set_reverse(true).
 * A kernel missing a barrier between a write and another thread's read
 * sees the write in one order and not in the other, so running a kernel
 * both ways and comparing catches it (kernel_check does).
 * Not modelled: memory ordering beyond that, dynamic shared memory,
 * textures, cooperative groups.
 *
 * Header-only, C++17, x86-64 or (through glibc's ucontext) other Linux. */
#ifndef CDDP_EMU_H
#define CDDP_EMU_H

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

/* ---- CUDA vocabulary ---------------------------------------------------- */
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ static
#ifndef EMU_NO_SHARED_SECTION
#define __shared__ static __attribute__((section("emu_shared")))
#else
#define __shared__ static
#endif
/* __restrict__ is a g++ keyword with CUDA's meaning: left alone. */

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = 32;

enum { EMU_MAX_THREADS = 1024 };
#ifndef EMU_STACK
#define EMU_STACK (64 * 1024)
#endif

extern "C" char __start_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace emu_detail {

/* ---- coroutine contexts ---------------------------------------------------- */
#if defined(__x86_64__)
/* emu_ctx_swap(save, load): pushes the callee-saved registers and the SSE
 * and x87 control words on the running stack, stores its pointer in
 * *save, switches to the stack load and pops the same from it. Weak and
 * hidden: every translation unit that includes this header defines it,
 * and the linker keeps one. */
extern "C" void emu_ctx_swap(void **save, void *load) __attribute__((visibility("hidden")));
asm(".text\n"
    ".weak emu_ctx_swap\n"
    ".hidden emu_ctx_swap\n"
    ".type emu_ctx_swap, @function\n"
    "emu_ctx_swap:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size emu_ctx_swap, .-emu_ctx_swap\n");
struct Ctx {
    void *sp = nullptr;
};
inline void ctx_swap(Ctx *from, Ctx *to) { emu_ctx_swap(&from->sp, to->sp); }
inline void ctx_stack_ready(Ctx *) {}
/* A context that starts fn (which never returns) on the stack [lo, lo + size):
 * the frame emu_ctx_swap pops, returning into fn as if it had been called. */
inline void ctx_make(Ctx *c, char *lo, size_t size, void (*fn)())
{
    uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                       /* fn's own return address: none */
    *--sp = (uint64_t)(uintptr_t)fn; /* emu_ctx_swap's ret lands in fn */
    for (int i = 0; i < 6; i++)
        *--sp = 0;                   /* rbp rbx r12 r13 r14 r15 */
    uint32_t csr;
    uint16_t cw;
    asm volatile("stmxcsr %0" : "=m"(csr));
    asm volatile("fnstcw %0" : "=m"(cw));
    *--sp = (uint64_t)csr | (uint64_t)cw << 32;
    c->sp = sp;
}
#else
struct Ctx {
    ucontext_t uc;
};
[[noreturn]] inline void die(const char *what);
inline void ctx_swap(Ctx *from, Ctx *to)
{
    if (swapcontext(&from->uc, &to->uc) != 0)
        die("swapcontext failed");
}
inline void ctx_stack_ready(Ctx *c)
{
    if (getcontext(&c->uc) != 0)
        die("getcontext failed");
}
inline void ctx_make(Ctx *c, char *lo, size_t size, void (*fn)())
{
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, fn, 0);
}
#endif

enum { RUN = 0, AT_SYNC = 1, AT_WARP = 2, DONE = 3 };

struct Thr {
    Ctx ctx;
    char *stack;            /* EMU_STACK usable bytes above a guard page */
    int state;
    uint3 tid;
};

struct St {
    Thr *th = nullptr;      /* [EMU_MAX_THREADS]: a ucontext_t must not move */
    int nstack = 0;         /* slots with a stack and an initialized ctx */
    Ctx sched;
    int cur = -1, nthr = 0, ndone = 0, nsync = 0, first_done = -1;
    unsigned warp_arrived[EMU_MAX_THREADS / 32], warp_mask[EMU_MAX_THREADS / 32];
    unsigned long long slot[EMU_MAX_THREADS]; /* a lane's published value */
    unsigned long long mma_calls[EMU_MAX_THREADS];  /* a lane's mma calls in this block */
    unsigned long long blocks_run = 0;              /* run_block calls so far: which block this is */
    void (*tramp)(void (*)(), const void *) = nullptr;
    void (*fn)() = nullptr;
    const void *arg = nullptr;
    const char *name = "kernel";
    bool failed = false, inside = false;
    bool reverse = false;   /* run the threads of a pass in descending id order */
    std::string msg;
    unsigned long long switches = 0;
#if EMU_ASAN
    const void *sched_bottom = nullptr; /* the launching thread's stack */
    size_t sched_size = 0;
#endif
};
inline St S;

[[noreturn]] inline void die(const char *what)
{
    fprintf(stderr, "emu: %s\n", what);
    abort();
}

/* Switch from the running context `from` (a thread's or the scheduler's)
 * to thread `to`, or to the scheduler when to < 0. */
inline void switch_to(Ctx *from, int to)
{
    St &s = S;
    Ctx *dst;
    if (to >= 0) {
        s.cur = to;
        threadIdx = s.th[to].tid;
        dst = &s.th[to].ctx;
    } else {
        s.cur = -1;
        dst = &s.sched;
    }
    s.switches++;
#if EMU_ASAN
    void *fs = nullptr;
    if (to >= 0)
        __sanitizer_start_switch_fiber(&fs, s.th[to].stack, EMU_STACK);
    else
        __sanitizer_start_switch_fiber(&fs, s.sched_bottom, s.sched_size);
    ctx_swap(from, dst);
    __sanitizer_finish_switch_fiber(fs, nullptr, nullptr);
#else
    ctx_swap(from, dst);
#endif
}

/* The running thread gives way: to the next runnable thread of this pass,
 * or back to the scheduler, which then releases barriers. */
inline void yield_thread()
{
    St &s = S;
    int me = s.cur;
    int next = -1;
    const int step = s.reverse ? -1 : 1;
    for (int j = me + step; j >= 0 && j < s.nthr; j += step)
        if (s.th[j].state == RUN) {
            next = j;
            break;
        }
    switch_to(&s.th[me].ctx, next);
    /* resumed: the scheduler (or a previous thread) set cur and threadIdx */
}

inline void fmt_tid(char *buf, size_t n, int i)
{
    const uint3 t = S.th[i].tid;
    snprintf(buf, n, "thread (%u,%u,%u)", t.x, t.y, t.z);
}

/* Report misuse from inside a thread: record it and leave the block. */
[[noreturn]] inline void fail(const char *fmt, ...)
{
    St &s = S;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    s.msg = buf;
    s.failed = true;
    if (s.cur < 0 || !s.inside)
        die(buf);
    switch_to(&s.th[s.cur].ctx, -1);
    die("abandoned thread resumed");
}

inline void thread_exit()
{
    St &s = S;
    int me = s.cur;
    s.th[me].state = DONE;
    s.ndone++;
    if (s.first_done < 0)
        s.first_done = me;
    int w = me / 32;
    /* the thread is named only when something is wrong: formatting it on
     * every exit was a quarter of an emulated step */
    if (s.nsync > 0 || (s.warp_arrived[w] && (s.warp_mask[w] >> (me & 31) & 1u))) {
        char who[64];
        fmt_tid(who, sizeof who, me);
        if (s.nsync > 0)
            fail("%s exited while %d other threads wait at __syncthreads", who, s.nsync);
        fail("%s exited while lanes 0x%08x of its warp wait for it at a warp operation (mask 0x%08x)", who,
             s.warp_arrived[w], s.warp_mask[w]);
    }
    yield_thread();
    die("finished thread resumed");
}

inline void entry()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    S.tramp(S.fn, S.arg);
    thread_exit();
}

inline void sync_block()
{
    St &s = S;
    if (!s.inside)
        die("__syncthreads() outside emu_launch");
    int me = s.cur;
    if (s.ndone > 0) {
        char who[64], gone[64];
        fmt_tid(who, sizeof who, me);
        fmt_tid(gone, sizeof gone, s.first_done);
        fail("%s reached __syncthreads after %s exited (%d exited in all)", who, gone, s.ndone);
    }
    s.th[me].state = AT_SYNC;
    s.nsync++;
    yield_thread();
}

inline int lane_id() { return S.cur & 31; }

/* Lanes of the running thread's warp that exist in this block. */
inline unsigned present_lanes()
{
    int base = S.cur & ~31;
    int k = S.nthr - base;
    return k >= 32 ? 0xffffffffu : (1u << k) - 1u;
}

/* A barrier among the lanes of `mask` in the running thread's warp. */
inline void sync_warp(unsigned mask, const char *op)
{
    St &s = S;
    if (!s.inside)
        die("warp operation outside emu_launch");
    int me = s.cur, lane = me & 31, w = me >> 5;
    unsigned present = present_lanes();
    int exited = -1;
    if (s.ndone > 0)
        for (int l = 0; l < 32 && exited < 0; l++)
            if ((mask >> l & 1u) && s.th[(w << 5) + l].state == DONE)
                exited = l;
    if (!(mask >> lane & 1u) || (mask & ~present) || exited >= 0 || (s.warp_arrived[w] && s.warp_mask[w] != mask)) {
        char who[64];
        fmt_tid(who, sizeof who, me);
        if (!(mask >> lane & 1u))
            fail("%s: %s with mask 0x%08x that excludes its own lane %d", who, op, mask, lane);
        if (mask & ~present)
            fail("%s: %s mask 0x%08x names lanes absent from a block of %d threads (warp %d has 0x%08x)",
                 who, op, mask, s.nthr, w, present);
        if (exited >= 0)
            fail("%s: %s mask 0x%08x names lane %d, which has exited", who, op, mask, exited);
        fail("%s: %s with mask 0x%08x while lanes 0x%08x of warp %d wait with mask 0x%08x", who, op,
             mask, s.warp_arrived[w], w, s.warp_mask[w]);
    }
    s.warp_mask[w] = mask;
    s.warp_arrived[w] |= 1u << lane;
    s.th[me].state = AT_WARP;
    yield_thread();
}

/* Publish v, wait for the mask, read lane src's value (src < 0: own),
 * wait again so nobody overwrites a slot before it was read. */
template <class T> inline T shfl(unsigned mask, T v, int src, const char *op)
{
    static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle of a type wider than 8 bytes");
    St &s = S;
    int me = s.cur;
    int lane = me & 31;
    s.slot[me] = 0;
    memcpy(&s.slot[me], &v, sizeof v);
    sync_warp(mask, op);
    T r = v;
    if (src >= 0 && src != lane) {
        if (!(mask >> src & 1u)) {
            char who[64];
            fmt_tid(who, sizeof who, s.cur);
            fail("%s: %s reads lane %d, outside mask 0x%08x (undefined on a GPU)", who, op, src, mask);
        }
        memcpy(&r, &s.slot[(s.cur & ~31) + src], sizeof r);
    }
    sync_warp(mask, op);
    return r;
}

/* Source lane of a shuffle as PTX shfl.sync defines it (c = clamp and
 * segment mask as the CUDA headers compute them from width); -1: own. */
inline int shfl_src(int mode, int b, int width)
{
    int lane = lane_id();
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fail("shuffle width %d is not a power of two in 1..32", width);
    int segmask = (32 - width) & 31;
    int cval = mode == 0 ? 0 : 31; /* up: clamp 0; down, bfly, idx: 0x1f */
    int maxLane = (lane & segmask) | (cval & ~segmask);
    int minLane = lane & segmask;
    int j, ok;
    b &= 31;
    switch (mode) {
    case 0: j = lane - b; ok = j >= maxLane; break;             /* up */
    case 1: j = lane + b; ok = j <= maxLane; break;             /* down */
    case 2: j = lane ^ b; ok = j <= maxLane; break;             /* bfly */
    default: j = minLane | (b & ~segmask); ok = j <= maxLane; break; /* idx */
    }
    return ok ? j : -1;
}

inline void run_block(unsigned nthr)
{
    St &s = S;
    s.nthr = (int)nthr;
    s.ndone = s.nsync = 0;
    s.first_done = -1;
    memset(s.warp_arrived, 0, sizeof s.warp_arrived);
    memset(s.warp_mask, 0, sizeof s.warp_mask);
    memset(s.mma_calls, 0, sizeof s.mma_calls);
    s.blocks_run++;
    const unsigned bx = blockDim.x, by = blockDim.y;
    for (unsigned i = 0; i < nthr; i++) {
        Thr &t = s.th[i];
        t.tid = uint3{i % bx, (i / bx) % by, i / (bx * by)};
        t.state = RUN;
#if EMU_ASAN && defined(__x86_64__)
        /* a thread abandoned mid-frame in an earlier block left its frames'
         * redzones poisoned: ASan's swapcontext interceptor clears a fresh
         * context's stack, so emu_ctx_swap's contexts do it here */
        __asan_unpoison_memory_region(t.stack, EMU_STACK);
#endif
        ctx_make(&t.ctx, t.stack, EMU_STACK, entry);
    }
    for (;;) {
        int first = -1;
        for (int k = 0; k < s.nthr; k++) {
            int i = s.reverse ? s.nthr - 1 - k : k;
            if (s.th[i].state == RUN) {
                first = i;
                break;
            }
        }
        if (first >= 0)
            switch_to(&s.sched, first);
        if (s.failed || s.ndone == s.nthr)
            return;
        /* every live thread now waits at a barrier: release what completed */
        bool released = false;
        if (s.nsync == s.nthr) {
            for (int i = 0; i < s.nthr; i++)
                s.th[i].state = RUN;
            s.nsync = 0;
            released = true;
        }
        for (int w = 0; w * 32 < s.nthr; w++)
            if (s.warp_arrived[w] && s.warp_arrived[w] == s.warp_mask[w]) {
                for (int l = 0; l < 32; l++)
                    if (s.warp_mask[w] >> l & 1u)
                        s.th[(w << 5) + l].state = RUN;
                s.warp_arrived[w] = 0;
                released = true;
            }
        if (!released) {
            char buf[512];
            int n = snprintf(buf, sizeof buf,
                             "deadlock: %d threads wait at __syncthreads, %d exited, of %d;", s.nsync,
                             s.ndone, s.nthr);
            for (int w = 0; w * 32 < s.nthr && n < (int)sizeof buf - 80; w++)
                if (s.warp_arrived[w])
                    n += snprintf(buf + n, sizeof buf - n, " warp %d: lanes 0x%08x wait (mask 0x%08x);",
                                  w, s.warp_arrived[w], s.warp_mask[w]);
            s.msg = buf;
            s.failed = true;
            return;
        }
    }
}

inline void ensure_stacks(unsigned nthr)
{
    St &s = S;
    if (!s.th) {
        s.th = new Thr[EMU_MAX_THREADS];
        memset((void *)s.th, 0, sizeof(Thr) * EMU_MAX_THREADS);
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    while (s.nstack < (int)nthr) {
        Thr &t = s.th[s.nstack];
        char *p = (char *)mmap(nullptr, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
        if (p == MAP_FAILED)
            die("cannot map a thread stack");
        if (mprotect(p, page, PROT_NONE) != 0) /* overflow faults instead of corrupting */
            die("cannot protect a stack guard page");
        t.stack = p + page;
        ctx_stack_ready(&t.ctx);
        s.nstack++;
    }
}

} /* namespace emu_detail */

/* ---- barriers, warp operations ------------------------------------------- */
inline void __syncthreads() { emu_detail::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_detail::sync_warp(mask, "__syncwarp"); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T> inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize)
{
    return emu_detail::shfl(mask, var, emu_detail::shfl_src(2, laneMask, width), "__shfl_xor_sync");
}
template <class T> inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return emu_detail::shfl(mask, var, emu_detail::shfl_src(1, (int)delta, width), "__shfl_down_sync");
}
template <class T> inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return emu_detail::shfl(mask, var, emu_detail::shfl_src(0, (int)delta, width), "__shfl_up_sync");
}
template <class T> inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize)
{
    return emu_detail::shfl(mask, var, emu_detail::shfl_src(3, srcLane, width), "__shfl_sync");
}

inline unsigned __ballot_sync(unsigned mask, int pred)
{
    using namespace emu_detail;
    St &s = S;
    int me = s.cur, base = me & ~31;
    s.slot[me] = pred != 0;
    sync_warp(mask, "__ballot_sync");
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1u) && s.slot[base + l])
            r |= 1u << l;
    sync_warp(mask, "__ballot_sync");
    return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

/* ---- tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} ------
 * The generated kernels reach the instruction through rt_mma_bf16 /
 * rt_mma_fp16 (compiler/emit_cuda.c's prelude: inline PTX on sm_80 and
 * later); here, with RT_EMU_MMA defined, those are these functions. Warp
 * collective: every lane of the warp must call it (the emulator reports a
 * lane that does not, as for a shuffle). Fragments as PTX ISA "Matrix
 * Fragments for mma.m16n8k16 with floating point type" lays them out,
 * g = lane / 4, t = lane % 4, each 32-bit register two 16-bit values, the
 * lower column (A) or row (B) in the low half:
 *   A (16x16, row):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
 *   B (16x8, col):   b0 (k 2t..2t+1, n g)   b1 (k 2t+8..2t+9, n g)
 *   C, D (16x8 f32): d0 d1 (g, 2t..2t+1)    d2 d3 (g+8, 2t..2t+1)
 * Products of bf16 or fp16 values are exact in float; each output adds
 * them to its accumulator in k order in float (the hardware's order and
 * its internal rounding are its own: kernel_check's tolerances cover it). */
#define RT_EMU_MMA 1
namespace emu_detail {
struct MmaFrag { unsigned a[4], b[2]; };
/* two slots a lane, used in turn: a lane refills slot p only after the
 * next call's barrier, which every lane reaches after reading slot p, so
 * one barrier per mma suffices */
inline MmaFrag mma_slot[2][EMU_MAX_THREADS];
/* a warp's operands decoded once per mma, by the first lane to run after
 * the barrier (the lanes run one after the other until the next one), for
 * the others to read: keyed by the block run and the lanes' count of mma
 * calls in it */
struct MmaOps { unsigned long long block, call; float A[16][16], B[16][8]; };
inline MmaOps mma_ops[EMU_MAX_THREADS / 32];

inline float h2f(unsigned h)
{
    const unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float f;
    if (e == 0)
        f = (float)m * 5.9604644775390625e-8f;      /* subnormal: m * 2^-24 */
    else if (e == 31)
        f = m ? NAN : INFINITY;
    else {
        const unsigned u = ((e + 112u) << 23) | (m << 13);
        memcpy(&f, &u, 4);
    }
    unsigned u;
    memcpy(&u, &f, 4);
    u |= s;
    memcpy(&f, &u, 4);
    return f;
}

inline float bf2f(unsigned h)
{
    const unsigned u = h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline void mma_m16n8k16(int fp16, float *d, const unsigned *a, const unsigned *b)
{
    St &s = S;
    const int me = s.cur, base = me & ~31, lane = me & 31;
    const unsigned long long call = ++s.mma_calls[me];
    const int p = (int)(call & 1);
    memcpy(mma_slot[p][me].a, a, sizeof mma_slot[p][me].a);
    memcpy(mma_slot[p][me].b, b, sizeof mma_slot[p][me].b);
    sync_warp(0xffffffffu, "mma.sync");
    MmaOps &o = mma_ops[me >> 5];
    if (o.block != s.blocks_run || o.call != call) {
        o.block = s.blocks_run;
        o.call = call;
        for (int l = 0; l < 32; l++) {
            const MmaFrag &f = mma_slot[p][base + l];
            const int g = l >> 2, t2 = 2 * (l & 3);
            auto v = [fp16](unsigned r, int hi) { const unsigned h = hi ? r >> 16 : r & 0xffffu; return fp16 ? h2f(h) : bf2f(h); };
            for (int hi = 0; hi < 2; hi++) {
                o.A[g][t2 + hi] = v(f.a[0], hi);
                o.A[g + 8][t2 + hi] = v(f.a[1], hi);
                o.A[g][t2 + 8 + hi] = v(f.a[2], hi);
                o.A[g + 8][t2 + 8 + hi] = v(f.a[3], hi);
                o.B[t2 + hi][g] = v(f.b[0], hi);
                o.B[t2 + 8 + hi][g] = v(f.b[1], hi);
            }
        }
    }
    const float (&A)[16][16] = o.A;
    const float (&B)[16][8] = o.B;
    const int g = lane >> 2, t2 = 2 * (lane & 3);
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = t2 + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; k++)
            acc += A[row][k] * B[k][col];
        d[i] = acc;
    }
}
} // namespace emu_detail

inline void rt_mma_bf16(float *d, const unsigned *a, const unsigned *b) { emu_detail::mma_m16n8k16(0, d, a, b); }
inline void rt_mma_fp16(float *d, const unsigned *a, const unsigned *b) { emu_detail::mma_m16n8k16(1, d, a, b); }
/* two bf16 values (floats already rounded to bf16: their top halves) */
inline unsigned rt_pack_bf16x2(float lo, float hi)
{
    unsigned l, h;
    memcpy(&l, &lo, 4);
    memcpy(&h, &hi, 4);
    return (h & 0xffff0000u) | (l >> 16);
}
/* two IEEE halves, as cvt.rn.f16.f32 converts (round to nearest even) */
inline unsigned emu_f2h(float x)
{
    unsigned u;
    memcpy(&u, &x, 4);
    const unsigned s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return s | 0x7e00u;
    if (a >= 0x477ff000u)
        return s | 0x7c00u;                         /* 65520 and up round to inf */
    if (a >= 0x38800000u)                           /* a normal half */
        return s | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
    float f;
    memcpy(&f, &a, 4);
    return s | (unsigned)nearbyintf(f * 16777216.0f);   /* a subnormal: q * 2^-24, q rounded to even */
}
inline unsigned rt_pack_fp16x2(float lo, float hi) { return emu_f2h(lo) | (emu_f2h(hi) << 16); }

/* ---- 16-bit storage ------------------------------------------------------
 * The generated kernels store an activation of precision bf16|fp16 as its
 * 16 bits (rt_bf16s / rt_fp16s, compiler/emit_cuda.c's prelude) only where
 * every value is already rounded to them (the compiler's mem_rounded): a
 * store that changes the value (back, what the 16 bits read as) is that
 * rule broken, reported as misuse. */
inline void emu_check16(float x, float back)
{
    if (memcmp(&x, &back, 4) && !(x != x && back != back))
        emu_detail::fail("a 16-bit buffer stores %.9g, which its 16 bits read back as %.9g: the value was not "
                         "rounded to the buffer's precision", (double)x, (double)back);
}
#define RT_CHECK16(x, back) emu_check16(x, back)

/* ---- rounding intrinsics ------------------------------------------------ */
/* a * b rounded to float, never fused into a following add (the emulator
 * is built with -ffp-contract=fast, as NVRTC contracts): volatile stops it */
inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}

/* ---- atomics: one OS thread, so plain read-modify-write ------------------ */
inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
inline double atomicAdd(double *p, double v) { double o = *p; *p = o + v; return o; }
inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long o = *p; *p = o + v; return o;
}
inline int atomicMax(int *p, int v) { int o = *p; if (v > o) *p = v; return o; }
inline int atomicMin(int *p, int v) { int o = *p; if (v < o) *p = v; return o; }
inline unsigned atomicMax(unsigned *p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
inline int atomicExch(int *p, int v) { int o = *p; *p = v; return o; }
inline float atomicExch(float *p, float v) { float o = *p; *p = v; return o; }
inline int atomicCAS(int *p, int cmp, int v) { int o = *p; if (o == cmp) *p = v; return o; }
inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v) { unsigned o = *p; if (o == cmp) *p = v; return o; }
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long v)
{
    unsigned long long o = *p; if (o == cmp) *p = v; return o;
}

/* ---- device functions that are not in <cmath> ----------------------------- */
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
template <class T> inline T __ldg(const T *p) { return *p; }

/* ---- launching ---------------------------------------------------------- */
inline const char *emu_last_error() { return emu_detail::S.msg.c_str(); }
/* Order in which the threads of a block run between barriers: ascending
 * linear id (default) or descending. A kernel that reads what another
 * thread wrote without a barrier in between gives different results in
 * the two orders, so running both catches a missing __syncthreads. */
inline void emu_set_reverse(bool reverse) { emu_detail::S.reverse = reverse; }
/* context switches so far (a measure of the emulation's cost) */
inline unsigned long long emu_switches() { return emu_detail::S.switches; }

/* Run kernel over grid x block on the CPU. 0 on success; on misuse -1,
 * the message printed (unless quiet) and kept in emu_last_error(). */
template <class E>
inline int emu_launch(void (*kernel)(const E *), dim3 grid, dim3 block, const E *e,
                      const char *name = "kernel", bool quiet = false)
{
    using namespace emu_detail;
    St &s = S;
    if (s.inside)
        die("emu_launch called from inside a kernel");
    s.msg.clear();
    s.failed = false;
    s.name = name;
    char buf[256];
    const unsigned long long nthr = (unsigned long long)block.x * block.y * block.z;
    if (!nthr || nthr > EMU_MAX_THREADS || block.z > 64 || !grid.x || !grid.y || !grid.z ||
        grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u) {
        snprintf(buf, sizeof buf, "invalid launch: grid (%u,%u,%u) block (%u,%u,%u)", grid.x, grid.y,
                 grid.z, block.x, block.y, block.z);
        s.msg = buf;
        if (!quiet)
            fprintf(stderr, "emu: %s: %s\n", name, buf);
        return -1;
    }
    ensure_stacks((unsigned)nthr);
#if EMU_ASAN
    {
        pthread_attr_t a;
        void *lo;
        if (pthread_getattr_np(pthread_self(), &a) != 0 || pthread_attr_getstack(&a, &lo, &s.sched_size) != 0)
            die("cannot find the launching thread's stack");
        pthread_attr_destroy(&a);
        s.sched_bottom = lo;
    }
#endif
    s.tramp = [](void (*fn)(), const void *arg) { ((void (*)(const E *))fn)((const E *)arg); };
    s.fn = (void (*)())kernel;
    s.arg = e;
    gridDim = grid;
    blockDim = block;
    const size_t shared_bytes =
        __start_emu_shared && __stop_emu_shared ? (size_t)(__stop_emu_shared - __start_emu_shared) : 0;
    s.inside = true;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = uint3{x, y, z};
                if (shared_bytes)
                    memset(__start_emu_shared, 0xff, shared_bytes);
                run_block((unsigned)nthr);
                if (s.failed) {
                    s.inside = false;
                    snprintf(buf, sizeof buf, "block (%u,%u,%u): ", x, y, z);
                    s.msg = buf + s.msg;
                    if (!quiet)
                        fprintf(stderr, "emu: %s %s\n", name, s.msg.c_str());
                    return -1;
                }
            }
    s.inside = false;
    return 0;
}

#endif
