/* mtl_runtime.c -- run one compiled MSL kernel on the CPU with Metal's execution rules.
 *
 * Linked into every kernel shared object next to the kernel (which defines
 * __mtl_entry(): call the kernel once, as one GPU thread). Python calls mtl_launch()
 * through ctypes; it is the only runtime function the library exports.
 *
 * Execution model
 *   - mtl_launch() copies the buffers into shared mappings that end at a guard page
 *     (and start after one), maps read-only buffers PROT_READ, then fork()s. The child
 *     runs the grid; a fault, a barrier error or a timeout ends only the child, which
 *     has written a structured report into shared memory first. The parent copies the
 *     writable buffers back only when the run succeeded. After fork() the child calls
 *     nothing but async-signal-safe functions and the kernel (no malloc, no stdio), so
 *     forking a multi-threaded Python process is safe.
 *   - Threadgroups run one at a time, in forward, reverse or random order. Each group
 *     is a team of fibers, one per thread, each on its own small stack with a guard
 *     page. A fiber runs until it reaches a barrier or returns; when every fiber has
 *     stopped, the scheduler checks that all of them wait at the same barrier (else
 *     "divergent barrier") or have all returned (else "early exit"), then releases
 *     the next interval. Threads are picked in forward, reverse or a fresh random
 *     order in every interval.
 *   - The kernel-scope threadgroup arrays are static objects that metal_emulator.py
 *     placed in the section "mtl_tg"; they are filled with 0xFF (a NaN for floats)
 *     before every group.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* The hand-written switch is x86-64 only; elsewhere (or with -DMTL_USE_UCONTEXT, to
 * compare) fibers use swapcontext, which measured 4.5-9x slower per switch. */
#if !defined(__x86_64__) || defined(MTL_USE_UCONTEXT)
#define MTL_UCONTEXT 1
#endif

#define MTL_API __attribute__((visibility("default")))
#define MTL_MAX_BUFFERS 31
#define MTL_MAX_THREADS 1024

/* ---- the ABI shared with metal_emulator.py (keep the two in step) ------------------ */
enum { MTL_ORDER_FORWARD = 0, MTL_ORDER_REVERSE = 1, MTL_ORDER_RANDOM = 2 };

enum {
  MTL_OK = 0,
  MTL_ERR_FAULT = 1,       /* a signal: segfault, bus error, FP trap, illegal instr. */
  MTL_ERR_DIVERGENT = 2,   /* threads wait at different barriers */
  MTL_ERR_EARLY_EXIT = 3,  /* some threads returned while others wait at a barrier */
  MTL_ERR_TIMEOUT = 4,
  MTL_ERR_SETUP = 5,       /* mmap/fork failed; errno_value says why */
  MTL_ERR_CRASH = 6,       /* the child died without a report */
  MTL_ERR_UNDERRUN = 7,    /* a write landed just before the start of a buffer */
};

enum { MTL_REGION_NONE = 0, MTL_REGION_DATA = 1, MTL_REGION_AFTER = 2,
       MTL_REGION_BEFORE = 3, MTL_REGION_STACK = 4 };

typedef struct {
  int32_t nbuffers;                   /* slots 0..nbuffers-1 */
  int32_t readonly[MTL_MAX_BUFFERS];  /* 1: map PROT_READ */
  int32_t used[MTL_MAX_BUFFERS];      /* 0: no buffer bound at this index */
  void *host[MTL_MAX_BUFFERS];        /* caller's data */
  uint64_t size[MTL_MAX_BUFFERS];     /* bytes */
  uint32_t grid[3];                   /* threadgroups per grid */
  uint32_t tpg[3];                    /* threads per threadgroup */
  int32_t order;
  uint64_t seed;
  double timeout_s;
  uint64_t stack_size;
} mtl_launch_t;

typedef struct {
  int32_t status;
  int32_t signo, si_code, is_write, errno_value;
  uint64_t fault_addr;
  int32_t buffer, region;
  int64_t offset;                       /* fault address minus buffer start */
  int32_t in_thread;                    /* 1: the fault happened inside a GPU thread */
  uint32_t group[3], thread[3];         /* where */
  uint32_t other_thread[3];             /* the thread it disagrees with */
  int32_t line, column, other_line, other_column;  /* barrier sites; 0: returned */
  uint64_t groups_done, barriers_passed, switches;
  double elapsed_s;
} mtl_report_t;

/* ---- what the kernel object provides and calls -------------------------------------- */
extern void __mtl_entry(void);
extern char __start_mtl_tg[] __attribute__((weak, visibility("hidden")));
extern char __stop_mtl_tg[] __attribute__((weak, visibility("hidden")));

/* ---- fibers ---------------------------------------------------------------------- */
enum { FIBER_READY = 0, FIBER_AT_BARRIER = 1, FIBER_DONE = 2 };

typedef struct {
  void *sp;
#ifdef MTL_UCONTEXT
  ucontext_t ctx;
#endif
  int32_t state, line, column;
  uint32_t pos[3];
} fiber_t;

#ifndef MTL_UCONTEXT
/* mtl_switch(save, load): store the callee-saved registers and the stack pointer into
 * *save, continue on stack `load`. A new fiber's stack is laid out so that the `ret`
 * enters fiber_main with the alignment of a normal call. */
void mtl_switch(void **save, void *load);
__asm__(".text\n"
        ".p2align 4\n"
        ".type mtl_switch,@function\n"
        "mtl_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mtl_switch, .-mtl_switch\n");
#endif

/* Where the parent mapped each buffer: data[i] is the first byte seen by the kernel. */
typedef struct {
  char *data[MTL_MAX_BUFFERS];
  char *region[MTL_MAX_BUFFERS];
  uint64_t region_len[MTL_MAX_BUFFERS];
} mapping_t;

/* The child's state. Only a child writes it, into its own copy after fork(); the
 * parent side (mtl_launch) keeps everything in locals, so Python threads may launch
 * kernels of the same library at the same time. */
static struct {
  const mtl_launch_t *launch;
  mtl_report_t *report;
  mapping_t m;
  fiber_t *fibers;
  char *stacks;
  uint64_t stack_stride;
  uint32_t nthreads;
  uint32_t *order;
  int32_t current;  /* running fiber, -1 in the scheduler */
  uint32_t group[3];
  void *sched_sp;
#ifdef MTL_UCONTEXT
  ucontext_t sched_ctx;
#endif
  uint64_t rng;
  uint64_t page;
} S;

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void shuffle(uint32_t *a, uint32_t n) {
  for (uint32_t i = n; i > 1; --i) {
    uint32_t j = (uint32_t)(splitmix64(&S.rng) % i);
    uint32_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}

static void copy3(uint32_t *dst, const uint32_t *src) {
  dst[0] = src[0];
  dst[1] = src[1];
  dst[2] = src[2];
}

static void switch_to_scheduler(void) {
  fiber_t *f = &S.fibers[S.current];
#ifdef MTL_UCONTEXT
  swapcontext(&f->ctx, &S.sched_ctx);
#else
  mtl_switch(&f->sp, S.sched_sp);
#endif
}

static void fiber_main(void) {
  __mtl_entry();
  S.fibers[S.current].state = FIBER_DONE;
  switch_to_scheduler();
  __builtin_trap(); /* a finished fiber is never resumed */
}

static void fiber_start(uint32_t t) {
  fiber_t *f = &S.fibers[t];
  char *top = S.stacks + (uint64_t)(t + 1) * S.stack_stride;
  f->state = FIBER_READY;
  f->line = f->column = 0;
#ifdef MTL_UCONTEXT
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = top - S.launch->stack_size;
  f->ctx.uc_stack.ss_size = S.launch->stack_size;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, fiber_main, 0);
#else
  void **sp = (void **)((uintptr_t)top & ~(uintptr_t)15);
  *--sp = 0;                    /* fiber_main's (absent) return address */
  *--sp = (void *)fiber_main;   /* where mtl_switch returns to */
  for (int i = 0; i < 6; ++i) *--sp = 0;  /* rbp rbx r12 r13 r14 r15 */
  f->sp = sp;
#endif
}

static void resume(uint32_t t) {
  S.current = (int32_t)t;
  S.report->switches++;
#ifdef MTL_UCONTEXT
  swapcontext(&S.sched_ctx, &S.fibers[t].ctx);
#else
  mtl_switch(&S.sched_sp, S.fibers[t].sp);
#endif
  S.current = -1;
}

/* ---- the kernel's calls (declared in metal_compat.h) --------------------------------- */
__attribute__((visibility("hidden"))) void *__mtl_rt_device_buffer(int index) {
  return (index >= 0 && index < S.launch->nbuffers) ? S.m.data[index] : 0;
}

__attribute__((visibility("hidden"))) void *__mtl_rt_constant_buffer(int index) {
  return __mtl_rt_device_buffer(index);
}

__attribute__((visibility("hidden"))) uint32_t __mtl_rt_position(int attribute, int c) {
  const mtl_launch_t *L = S.launch;
  const uint32_t *tid = S.fibers[S.current].pos;
  switch (attribute) {
    case 0: return S.group[c] * L->tpg[c] + tid[c];      /* thread_position_in_grid */
    case 1: return S.group[c];                           /* threadgroup_position_in_grid */
    case 2: return tid[c];                               /* thread_position_in_threadgroup */
    case 3: return L->tpg[c];                            /* threads_per_threadgroup */
    case 4: return L->grid[c];                           /* threadgroups_per_grid */
    case 5: return L->grid[c] * L->tpg[c];               /* threads_per_grid */
    case 6: return (tid[2] * L->tpg[1] + tid[1]) * L->tpg[0] + tid[0];  /* index */
    default: return 0;
  }
}

__attribute__((visibility("hidden"))) void __mtl_rt_threadgroup_barrier(int line, int column,
                                                                       uint32_t flags) {
  (void)flags; /* mem_flags are not told apart: every barrier orders all memory */
  fiber_t *f = &S.fibers[S.current];
  f->state = FIBER_AT_BARRIER;
  f->line = line;
  f->column = column;
  switch_to_scheduler();
}

/* ---- faults ---------------------------------------------------------------------- */
static void locate(uint64_t addr) {
  mtl_report_t *R = S.report;
  R->buffer = -1;
  R->region = MTL_REGION_NONE;
  for (int i = 0; i < S.launch->nbuffers; ++i) {
    if (!S.launch->used[i]) continue;
    uint64_t lo = (uint64_t)(uintptr_t)S.m.region[i], hi = lo + S.m.region_len[i];
    if (addr < lo || addr >= hi) continue;
    uint64_t start = (uint64_t)(uintptr_t)S.m.data[i];
    R->buffer = i;
    R->offset = (int64_t)(addr - start);
    if (addr < start) R->region = MTL_REGION_BEFORE;
    else if (addr >= start + S.launch->size[i]) R->region = MTL_REGION_AFTER;
    else R->region = MTL_REGION_DATA;
    return;
  }
  uint64_t slo = (uint64_t)(uintptr_t)S.stacks;
  if (S.stacks && addr >= slo && addr < slo + S.stack_stride * S.nthreads &&
      (addr - slo) % S.stack_stride < S.page)
    R->region = MTL_REGION_STACK;
}

static void record_position(void) {
  mtl_report_t *R = S.report;
  copy3(R->group, S.group);
  R->in_thread = S.current >= 0;
  if (S.current >= 0) copy3(R->thread, S.fibers[S.current].pos);
}

static void on_signal(int signo, siginfo_t *si, void *uc) {
  mtl_report_t *R = S.report;
  R->status = signo == SIGALRM ? MTL_ERR_TIMEOUT : MTL_ERR_FAULT;
  R->signo = signo;
  R->si_code = si->si_code;
  R->buffer = -1;
  R->region = MTL_REGION_NONE;
  if (signo != SIGALRM) {
    R->fault_addr = (uint64_t)(uintptr_t)si->si_addr;
#if defined(__x86_64__)
    R->is_write = (((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)uc;
    R->is_write = -1;
#endif
    if (signo == SIGSEGV || signo == SIGBUS) locate(R->fault_addr);
  }
  record_position();
  _exit(100);
}

static int install_handlers(void) {
  static char altstack[1 << 16];
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
  if (sigaltstack(&ss, 0)) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigfillset(&sa.sa_mask);
  const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGALRM};
  for (unsigned i = 0; i < sizeof signals / sizeof signals[0]; ++i)
    if (sigaction(signals[i], &sa, 0)) return -1;
  struct itimerval it;
  memset(&it, 0, sizeof it);
  it.it_value.tv_sec = (time_t)S.launch->timeout_s;
  it.it_value.tv_usec = (suseconds_t)((S.launch->timeout_s - (double)it.it_value.tv_sec) * 1e6);
  if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
  return setitimer(ITIMER_REAL, &it, 0);
}

/* ---- one threadgroup -------------------------------------------------------------- */
static int fail_barrier(int status, uint32_t a, uint32_t b) {
  mtl_report_t *R = S.report;
  R->status = status;
  copy3(R->group, S.group);
  copy3(R->thread, S.fibers[a].pos);
  copy3(R->other_thread, S.fibers[b].pos);
  R->line = S.fibers[a].line;
  R->column = S.fibers[a].column;
  R->other_line = S.fibers[b].line;
  R->other_column = S.fibers[b].column;
  return status;
}

static void interval_order(void) {
  uint32_t n = S.nthreads;
  for (uint32_t i = 0; i < n; ++i)
    S.order[i] = S.launch->order == MTL_ORDER_REVERSE ? n - 1 - i : i;
  if (S.launch->order == MTL_ORDER_RANDOM) shuffle(S.order, n);
}

static int run_group(void) {
  const mtl_launch_t *L = S.launch;
  if (__start_mtl_tg && __stop_mtl_tg > __start_mtl_tg)
    memset(__start_mtl_tg, 0xFF, (size_t)(__stop_mtl_tg - __start_mtl_tg));
  for (uint32_t t = 0; t < S.nthreads; ++t) {
    fiber_t *f = &S.fibers[t];
    f->pos[0] = t % L->tpg[0];
    f->pos[1] = (t / L->tpg[0]) % L->tpg[1];
    f->pos[2] = t / (L->tpg[0] * L->tpg[1]);
    fiber_start(t);
  }
  for (;;) {
    interval_order();
    for (uint32_t i = 0; i < S.nthreads; ++i)
      if (S.fibers[S.order[i]].state == FIBER_READY) resume(S.order[i]);
    int32_t waiting = -1, done = -1;
    for (uint32_t t = 0; t < S.nthreads; ++t) {
      fiber_t *f = &S.fibers[t];
      if (f->state == FIBER_DONE) {
        if (done < 0) done = (int32_t)t;
      } else if (waiting < 0) {
        waiting = (int32_t)t;
      } else if (f->line != S.fibers[waiting].line || f->column != S.fibers[waiting].column) {
        return fail_barrier(MTL_ERR_DIVERGENT, (uint32_t)waiting, t);
      }
    }
    if (waiting < 0) return MTL_OK;
    if (done >= 0) return fail_barrier(MTL_ERR_EARLY_EXIT, (uint32_t)waiting, (uint32_t)done);
    S.report->barriers_passed++;
    for (uint32_t t = 0; t < S.nthreads; ++t) S.fibers[t].state = FIBER_READY;
  }
}

static void *child_map(uint64_t bytes) {
  void *p = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? 0 : p;
}

static int run_child(void) {
  const mtl_launch_t *L = S.launch;
  mtl_report_t *R = S.report;
  S.current = -1;
  S.rng = L->seed;
  S.page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (install_handlers()) return MTL_ERR_SETUP;
  uint64_t page = S.page;
  S.nthreads = L->tpg[0] * L->tpg[1] * L->tpg[2];
  S.stack_stride = (L->stack_size + page - 1) / page * page + page; /* + guard page */
  uint64_t ngroups = (uint64_t)L->grid[0] * L->grid[1] * L->grid[2];
  S.fibers = child_map(sizeof(fiber_t) * S.nthreads);
  S.order = child_map(sizeof(uint32_t) * S.nthreads);
  S.stacks = child_map(S.stack_stride * S.nthreads);
  uint32_t *groups = L->order == MTL_ORDER_RANDOM ? child_map(sizeof(uint32_t) * ngroups) : 0;
  if (!S.fibers || !S.order || !S.stacks || (L->order == MTL_ORDER_RANDOM && !groups))
    return MTL_ERR_SETUP;
  for (uint32_t t = 0; t < S.nthreads; ++t) /* a guard page below every stack */
    if (mprotect(S.stacks + (uint64_t)t * S.stack_stride, (size_t)page, PROT_NONE))
      return MTL_ERR_SETUP;
  if (groups) {
    for (uint64_t g = 0; g < ngroups; ++g) groups[g] = (uint32_t)g;
    shuffle(groups, (uint32_t)ngroups);
  }
  for (uint64_t k = 0; k < ngroups; ++k) {
    uint64_t g = groups ? groups[k] : L->order == MTL_ORDER_REVERSE ? ngroups - 1 - k : k;
    S.group[0] = (uint32_t)(g % L->grid[0]);
    S.group[1] = (uint32_t)((g / L->grid[0]) % L->grid[1]);
    S.group[2] = (uint32_t)(g / ((uint64_t)L->grid[0] * L->grid[1]));
    int status = run_group();
    if (status != MTL_OK) return status;
    R->groups_done++;
  }
  return MTL_OK;
}

/* ---- the parent ------------------------------------------------------------------- */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define MTL_CANARY 0xA5

static int map_buffers(const mtl_launch_t *L, mapping_t *M) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (int i = 0; i < L->nbuffers; ++i) {
    if (!L->used[i]) continue;
    uint64_t body = (L->size[i] + page - 1) / page * page;
    void *p = mmap(0, body + 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                   0);
    if (p == MAP_FAILED) return -1;
    M->region[i] = p;
    M->region_len[i] = body + 2 * page;
    char *first = M->region[i] + page;
    M->data[i] = first + (body - L->size[i]); /* the last byte touches the guard page */
    memset(first, MTL_CANARY, (size_t)(M->data[i] - first));
    if (L->size[i]) memcpy(M->data[i], L->host[i], (size_t)L->size[i]);
    if (mprotect(M->region[i], (size_t)page, PROT_NONE) ||
        mprotect(first + body, (size_t)page, PROT_NONE) ||
        (L->readonly[i] && body && mprotect(first, (size_t)body, PROT_READ)))
      return -1;
  }
  return 0;
}

static void unmap_buffers(const mtl_launch_t *L, const mapping_t *M) {
  for (int i = 0; i < L->nbuffers; ++i)
    if (M->region[i]) munmap(M->region[i], M->region_len[i]);
}

/* A write that landed between the page boundary and the start of the buffer. */
static int check_underrun(const mtl_launch_t *L, const mapping_t *M, mtl_report_t *R) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (int i = 0; i < L->nbuffers; ++i) {
    if (!L->used[i] || L->readonly[i]) continue;
    const unsigned char *first = (const unsigned char *)M->region[i] + page;
    const unsigned char *data = (const unsigned char *)M->data[i];
    for (const unsigned char *p = first; p < data; ++p) {
      if (*p != MTL_CANARY) {
        R->status = MTL_ERR_UNDERRUN;
        R->buffer = i;
        R->region = MTL_REGION_BEFORE;
        R->offset = (int64_t)(p - data);
        return 1;
      }
    }
  }
  return 0;
}

MTL_API int mtl_launch(const mtl_launch_t *L, mtl_report_t *out) {
  double t0 = now_s();
  memset(out, 0, sizeof *out);
  uint64_t threads = (uint64_t)L->tpg[0] * L->tpg[1] * L->tpg[2];
  uint64_t groups = (uint64_t)L->grid[0] * L->grid[1] * L->grid[2];
  if (L->nbuffers < 0 || L->nbuffers > MTL_MAX_BUFFERS || threads == 0 ||
      threads > MTL_MAX_THREADS || groups == 0 || groups > UINT32_MAX)
    return out->status = MTL_ERR_SETUP;
  mtl_report_t *R = mmap(0, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (R == MAP_FAILED) return out->status = MTL_ERR_SETUP;
  memset(R, 0, sizeof *R);
  mapping_t M;
  memset(&M, 0, sizeof M);
  pid_t pid = -1;
  if (map_buffers(L, &M) == 0) pid = fork();
  if (pid == 0) {
    S.launch = L;
    S.report = R;
    S.m = M;
    _exit(R->status = run_child());
  }
  if (pid < 0) {
    R->status = MTL_ERR_SETUP;
    R->errno_value = errno;
  } else {
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {}
    if (R->status == MTL_OK && (WIFSIGNALED(wstatus) || WEXITSTATUS(wstatus) != 0)) {
      R->status = MTL_ERR_CRASH;
      R->signo = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    }
  }
  if (R->status == MTL_OK && !check_underrun(L, &M, R)) {
    for (int i = 0; i < L->nbuffers; ++i)
      if (L->used[i] && !L->readonly[i] && L->size[i])
        memcpy(L->host[i], M.data[i], (size_t)L->size[i]);
  }
  *out = *R;
  out->elapsed_s = now_s() - t0;
  unmap_buffers(L, &M);
  munmap(R, sizeof *R);
  return out->status;
}
