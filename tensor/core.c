/* Errors, heap accounting and the arena (bump allocator). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "threads_internal.h"

/* ---- errors ---- */

static void default_error(const char *message, void *user) {
    (void)user;
    fprintf(stderr, "attograd: %s\n", message);
    fflush(stderr);
    abort();
}

static ag_error_fn error_fn = default_error;
static void *error_user;
static char last_error[1024];

ag_error_fn ag_set_error_handler(ag_error_fn fn, void *user) {
    ag_error_fn prev = error_fn == default_error ? NULL : error_fn;
    error_fn = fn ? fn : default_error;
    error_user = fn ? user : NULL;
    return prev;
}

void ag_error(const char *op, const char *fmt, ...) {
    int n = snprintf(last_error, sizeof last_error, "%s: ", op);
    if (n < 0 || (size_t)n >= sizeof last_error) n = (int)sizeof last_error - 1; /* op name cut */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    error_fn(last_error, error_user);
}

const char *ag_last_error(void) { return last_error; }
void ag_clear_error(void) { last_error[0] = 0; }

char *ag__shape_str(int ndim, const int64_t *shape, char *buf) {
    /* buf holds 128 bytes; 8 dims of 20-character sizes do not, so such shapes end in "...)" */
    const size_t cap = 128;
    size_t n = 1;
    buf[0] = '(';
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (n + 2 > cap) {
        strcpy(buf + cap - 5, "...)");
    } else {
        buf[n] = ')';
        buf[n + 1] = 0;
    }
    return buf;
}

char *ag_shape_str(const ag_tensor *t, char *buf) {
    if (!t) return strcpy(buf, "(null)");
    return ag__shape_str(t->ndim, t->shape, buf);
}

const char *ag_dtype_name(ag_dtype dt) {
    static const char *names[] = {"f32", "f64", "i32", "i64", "bool"};
    return (unsigned)dt < 5 ? names[dt] : "?";
}

size_t ag_dtype_size(ag_dtype dt) {
    static const size_t sizes[] = {4, 8, 4, 8, 1};
    return (unsigned)dt < 5 ? sizes[dt] : 0;
}

/* ---- heap accounting ---- */

static _Atomic uint64_t alloc_count;

uint64_t ag_alloc_count(void) { return atomic_load(&alloc_count); }

void *ag__try_malloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    atomic_fetch_add(&alloc_count, 1);
    return p;
}

void *ag_xmalloc(size_t bytes) {
    void *p = ag__try_malloc(bytes);
    if (!p) {
        fprintf(stderr, "attograd: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    return p;
}

void ag_xfree(void *p) { free(p); }

void *ag__grow(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t cap2 = *cap ? 2 * *cap : 64;
    while (cap2 < need) cap2 *= 2;
    void *q = ag_xmalloc(cap2 * size);
    if (p) memcpy(q, p, *cap * size);
    ag_xfree(p);
    *cap = cap2;
    return q;
}

void ag__zero(void *p, size_t bytes) {
    enum { PIECE = 1 << 18 }; /* 256 KiB per task */
    int64_t pieces = (int64_t)((bytes + PIECE - 1) / PIECE), par_work = (int64_t)bytes / 4;
    if (pieces < 2) {
        memset(p, 0, bytes);
        return;
    }
    AG_PAR_FOR
    for (int64_t i = 0; i < pieces; i++) {
        size_t off = (size_t)i * PIECE;
        memset((char *)p + off, 0, bytes - off < PIECE ? bytes - off : PIECE);
    }
}

/* ---- arena ----
 * A list of blocks; allocation bumps within the last block and opens a new block (at least
 * twice the last) when full. Reset coalesces several blocks into one of their total size, so
 * after the first reset a step of the same shape runs in one block with no allocation.
 *
 * Tensor headers come from small arenas of their own, two pairs of halves. A step's headers go
 * to one pair; a reset switches to the other pair and leaves the memory of the pair just used
 * as it is until the reset after. Inside a step, a rewind switches to the other half of the
 * pair, leaving the half just used as it is until the switch after. So a tensor kept past a
 * reset (or past a rewind with none inside it) still has its header, generation stamp
 * included, during the next generation, and is reported; one kept longer is only while no
 * newer header has taken its place. The
 * halves' free space is not poisoned under AddressSanitizer: the stamp check reads it, and
 * reports.
 *
 * The halves' memory is never given back: a reset rewinds their blocks instead of coalescing
 * them (adding a block when the pair must grow), and ag_arena_free keeps an arena's halves,
 * with its row, for the next ag_arena_new. So the check on a tensor kept past a reset, a
 * rewind or the free of its arena reads a header that is still the library's memory, never
 * freed memory: a freed arena's row has moved on, and its tensors read as dead. Header memory
 * is a small part of an arena (a few hundred bytes a tensor), and arenas alive at once bound
 * how much is kept. */

/* Under AddressSanitizer the free space is poisoned (AG_POISON): see internal.h. */

typedef struct block {
    struct block *next;
    size_t size, used;
    char *mem;
} block;

struct ag_arena {
    block *first, *cur;
    ag_arena *next_kept;   /* the list of freed arenas whose halves are kept (see above) */
    size_t total_used;
    uint32_t slot;         /* its row of ag__arena_gens (0: untracked, when every row is taken) */
    bool poison;           /* poison free space under AddressSanitizer (not the halves) */
    bool warned;           /* the growth warning was given */
    size_t warn_bytes;     /* bytes in use (since the last reset) past which a new block warns; 0: never */
    ag_arena *halves[4];   /* where its tensor headers come from: pairs 0-1, 2-3 (NULL in a half) */
    int pair, half;        /* the pair in use (0 or 1), and its half in use (0 or 1) */
};

/* the position of a mark, packed into ag_arena_mark's words */
typedef struct {
    block *b[3];                 /* the arena, then the halves of the pair in use */
    size_t used[3], total[3];
    uint64_t generation;
} mark_t;
_Static_assert(sizeof(mark_t) <= sizeof(((ag_arena_mark *)0)->internal), "ag_arena_mark.internal too small");

/* ---- arena generations ----
 * A header notes its arena's row and that arena's generation when it was made
 * (ag__arena_header).
 * The generation moves on at every reset, mark and rewind; the row says which generations are
 * still alive: those from live_from on, except the interval [dead_lo, dead_hi] that the last
 * rewinds forgot (adjacent intervals merge, so a loop rewinding to one mark stays one interval;
 * a disjoint older one is dropped: it goes unreported, never misreported). A freed arena keeps
 * its row, which moves on at the free, and so does the arena that reuses it: a tensor of a
 * freed arena stays dead. Arenas may be made
 * and freed on several threads (each arena used by one at a time): rows are taken atomically. */
ag__arena_gen ag__arena_gens[AG_ARENA_SLOTS];
static atomic_bool slot_taken[AG_ARENA_SLOTS];

static uint32_t slot_take(void) {
    for (uint32_t i = 1; i < AG_ARENA_SLOTS; i++)
        if (!atomic_exchange(&slot_taken[i], true)) {
            ag__arena_gen *g = &ag__arena_gens[i];
            g->live_from = ++g->gen;
            g->dead_lo = 1;
            g->dead_hi = 0;
            return i;
        }
    return 0;
}

/* Everything made so far in the arena is dead; the next generation begins. */
static void gen_reset(uint32_t slot) {
    ag__arena_gen *g = &ag__arena_gens[slot];
    g->live_from = ++g->gen;
    g->dead_lo = 1;
    g->dead_hi = 0;
}

bool ag__report_dead(const char *op, const ag_tensor *t) {
    char b[128];
    const ag__tensor_state *s = ag__state(t);
    if (s->arena_slot >= AG_ARENA_SLOTS) {
        ag_error(op, "a tensor whose header has been overwritten (its arena memory was reused): a tensor kept past "
                 "ag_arena_reset or ag_arena_rewind?");
        return false;
    }
    const ag__arena_gen *g = &ag__arena_gens[s->arena_slot];
    const char *by = s->generation < g->live_from ? "ag_arena_reset (or ag_arena_free)" : "ag_arena_rewind";
    ag_error(op, "%s %s tensor made in arena generation %llu, which %s has forgotten (the arena is at generation "
             "%llu): its memory now holds newer tensors; copy what must outlive a step out of the arena first",
             ag_shape_str(t, b), ag_dtype_name(t->dtype), (unsigned long long)s->generation, by,
             (unsigned long long)g->gen);
    return false;
}

/* NULL when the system cannot provide size bytes */
static block *block_new(size_t size, bool poison) {
    block *b = ag_xmalloc(sizeof *b);
    b->next = NULL;
    b->size = size;
    b->used = 0;
    if (!(b->mem = ag__try_malloc(size))) {
        ag_xfree(b);
        return NULL;
    }
    if (poison) AG_POISON(b->mem, size);
    return b;
}

static ag_arena *arena_make(size_t initial_bytes, bool halves) {
    ag_arena *a = ag_xmalloc(sizeof *a);
    memset(a, 0, sizeof *a);
    a->poison = halves;
    a->first = a->cur = block_new(initial_bytes < 4096 ? 4096 : initial_bytes, a->poison);
    if (!a->first) {
        fprintf(stderr, "attograd: out of memory allocating an arena of %zu bytes\n", initial_bytes);
        abort();
    }
    if (halves) {
        a->slot = slot_take();
        a->warn_bytes = AG_ARENA_WARN_BYTES;
        for (int h = 0; h < 4; h++) a->halves[h] = arena_make(16384, false);
    }
    return a;
}

/* freed arenas, their halves and rows kept for the next ag_arena_new (arenas may be made and
 * freed on several threads) */
static ag_arena *kept_arenas;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

ag_arena *ag_arena_new(size_t initial_bytes) {
    pthread_mutex_lock(&kept_lock);
    ag_arena *a = kept_arenas;
    if (a) kept_arenas = a->next_kept;
    pthread_mutex_unlock(&kept_lock);
    if (!a) return arena_make(initial_bytes, true);
    a->next_kept = NULL;
    a->first = a->cur = block_new(initial_bytes < 4096 ? 4096 : initial_bytes, a->poison);
    if (!a->first) {
        fprintf(stderr, "attograd: out of memory allocating an arena of %zu bytes\n", initial_bytes);
        abort();
    }
    a->total_used = 0;
    a->warned = false;
    a->warn_bytes = AG_ARENA_WARN_BYTES;
    return a;
}

void ag_arena_set_growth_warning(ag_arena *a, size_t bytes) {
    a->warn_bytes = bytes;
    a->warned = false;
}

static void free_blocks(block *b) {
    while (b) {
        block *n = b->next;
        AG_UNPOISON(b->mem, b->size);
        ag_xfree(b->mem);
        ag_xfree(b);
        b = n;
    }
}

static void halves_switch(ag_arena *a);

void ag_arena_free(ag_arena *a) {
    if (!a) return;
    free_blocks(a->first);
    a->first = a->cur = NULL;
    if (!a->halves[0]) {
        ag_xfree(a);
        return;
    }
    /* everything made in it is dead; its headers stay readable (see above) */
    halves_switch(a);
    if (a->slot) gen_reset(a->slot);
    pthread_mutex_lock(&kept_lock);
    a->next_kept = kept_arenas;
    kept_arenas = a;
    pthread_mutex_unlock(&kept_lock);
}

static size_t blocks_size(const ag_arena *a) {
    size_t total = 0;
    for (const block *b = a->first; b; b = b->next) total += b->size;
    return total;
}

static void blocks_rewind(ag_arena *a, block *b, size_t used, size_t total);

/* Forget everything, the blocks coalesced into one. When the system cannot provide the one
 * block, the blocks stay as they are (rewound: a step allocates from them in turn). */
static void blocks_reset(ag_arena *a) {
    if (a->first->next) {
        block *one = block_new(blocks_size(a), a->poison);
        if (one) {
            free_blocks(a->first);
            a->first = one;
        }
    }
    blocks_rewind(a, a->first, 0, 0);
    ag__threads_between_steps(); /* a step ends: the thread count may follow the load */
}

/* back to the position (b, used, total): everything allocated after it is forgotten */
static void blocks_rewind(ag_arena *a, block *b, size_t used, size_t total) {
    if (a->poison) AG_POISON(b->mem + used, b->used - used);
    b->used = used;
    for (block *n = b->next; n; n = n->next) { /* later blocks stay for reuse */
        if (a->poison) AG_POISON(n->mem, n->used);
        n->used = 0;
    }
    a->cur = b;
    a->total_used = total;
}

/* A header half forgets everything and holds at least at_least bytes: its blocks are rewound,
 * never freed (a block is added when it must grow; if that fails, allocation grows it later). */
static void half_reset(ag_arena *h, size_t at_least) {
    size_t total = blocks_size(h);
    if (total < at_least) {
        block *last = h->first;
        while (last->next) last = last->next;
        last->next = block_new(at_least - total < 4096 ? 4096 : at_least - total, false);
    }
    blocks_rewind(h, h->first, 0, 0);
}

/* The pair to be used starts afresh, as large as the pair just used (so a step like the last
 * one allocates nothing); the other keeps its headers until the next switch. */
static void halves_switch(ag_arena *a) {
    for (int h = 0; h < 2; h++) {
        ag_arena *keep = a->halves[2 * a->pair + h], *next = a->halves[2 * (a->pair ^ 1) + h];
        half_reset(next, blocks_size(keep));
        blocks_rewind(keep, keep->first, 0, 0);
    }
    a->pair ^= 1;
    a->half = 0;
}

void ag_arena_reset(ag_arena *a) {
    blocks_reset(a);
    if (a->halves[0]) {
        halves_switch(a);
        gen_reset(a->slot);
    }
}

void *ag_arena_alloc(ag_arena *a, size_t asked) {
    size_t bytes = (asked + 63) & ~(size_t)63;
    block *b = a->cur;
    while (b->used + bytes > b->size && b->next) b = a->cur = b->next; /* blocks kept by a rewind */
    if (bytes < asked) return NULL; /* asked is within 63 bytes of SIZE_MAX */
    if (b->used + bytes > b->size) {
        size_t size = b->size * 2 > bytes ? b->size * 2 : bytes;
        block *next = block_new(size, a->poison);
        if (!next && size > bytes) next = block_new(size = bytes, a->poison); /* doubling may ask too much */
        if (!next) return NULL;
        if (a->warn_bytes && !a->warned && a->total_used + bytes > a->warn_bytes) {
            a->warned = true;
            fprintf(stderr, "attograd: warning: an arena holds %zu MiB allocated since its last ag_arena_reset and "
                    "grows: reset it after every step (ag_arena_reset), or raise the threshold of %zu MiB "
                    "(ag_arena_set_growth_warning)\n", (a->total_used + bytes) >> 20, a->warn_bytes >> 20);
        }
        b->next = next;
        b = a->cur = next;
    }
    void *p = b->mem + b->used;
    AG_UNPOISON(p, asked);
    b->used += bytes;
    a->total_used += bytes;
    return p;
}

void *ag__alloc(const char *op, ag_arena *a, size_t bytes, const char *what) {
    void *p = ag_arena_alloc(a, bytes);
    if (!p) ag_error(op, "cannot allocate %zu bytes for %s: out of memory", bytes, what);
    return p;
}

ag_tensor *ag__arena_header(ag_arena *a) {
    ag_tensor *t = ag_arena_alloc(a->halves[0] ? a->halves[2 * a->pair + a->half] : a, sizeof *t);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    ag__tensor_state *s = ag__state(t);
    s->version = &s->own_version;
    s->arena_slot = a->slot;
    s->generation = ag__arena_gens[a->slot].gen;
    return t;
}

size_t ag_arena_used(const ag_arena *a) {
    size_t n = a->total_used;
    for (int h = 0; h < 4 && a->halves[0]; h++) n += a->halves[h]->total_used;
    return n;
}

void ag__drop_pages(const void *from, const void *to) {
#ifdef MADV_DONTNEED
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)from + page - 1) & ~(page - 1), hi = (uintptr_t)to & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a refusal changes nothing */
#endif
}

void ag_arena_trim(ag_arena *a) {
    for (block *b = a->first; b; b = b->next) ag__drop_pages(b->mem + b->used, b->mem + b->size);
    for (int h = 0; h < 4 && a->halves[0]; h++) ag_arena_trim(a->halves[h]);
}

ag_arena_mark ag_arena_get_mark(const ag_arena *a) {
    mark_t m = {{a->cur}, {a->cur->used}, {a->total_used}, 0};
    for (int h = 0; h < 2 && a->halves[0]; h++) {
        const ag_arena *half = a->halves[2 * a->pair + h];
        m.b[h + 1] = half->cur;
        m.used[h + 1] = half->cur->used;
        m.total[h + 1] = half->total_used;
    }
    /* what is made from now on belongs to a new generation, which a rewind to the mark forgets */
    m.generation = a->slot ? ag__arena_gens[a->slot].gen++ : 0;
    ag_arena_mark r;
    memcpy(&r, &m, sizeof m);
    return r;
}

void ag_arena_rewind(ag_arena *a, ag_arena_mark mark) {
    mark_t m;
    memcpy(&m, &mark, sizeof m);
    blocks_rewind(a, m.b[0], m.used[0], m.total[0]);
    if (!a->halves[0]) return;
    for (int h = 0; h < 2; h++) blocks_rewind(a->halves[2 * a->pair + h], m.b[h + 1], m.used[h + 1], m.total[h + 1]);
    a->half ^= 1; /* the forgotten headers stay as they are for a generation */
    ag__arena_gen *g = &ag__arena_gens[a->slot];
    if (a->slot && m.generation >= g->live_from) { /* generations m.generation+1 .. gen are forgotten */
        if (g->dead_lo > g->dead_hi || g->dead_hi < m.generation) g->dead_lo = m.generation + 1;
        else if (g->dead_lo > m.generation + 1) g->dead_lo = m.generation + 1;
        g->dead_hi = g->gen++;
    }
}

void *ag__arena_rewind_move(ag_arena *a, ag_arena_mark m, const void *src, size_t bytes) {
    ag_arena_rewind(a, m);
    /* The destination is the first block with room, at its first free byte; src's own block has
     * room at a position no later than src, so dst <= src within one block (or another block):
     * memmove copies overlapping memory correctly. src is read after the rewind poisoned it. */
    AG_UNPOISON(src, bytes);
    char *dst = ag_arena_alloc(a, bytes);
    memmove(dst, src, bytes);
    AG_POISON(src, bytes);
    AG_UNPOISON(dst, bytes);
    return dst;
}

static ag_arena *current_arena, *default_arena;

ag_arena *ag_arena_use(ag_arena *a) {
    ag_arena *prev = ag_arena_current();
    current_arena = a;
    return prev;
}

ag_arena *ag_arena_current(void) {
    if (current_arena) return current_arena;
    if (!default_arena) default_arena = ag_arena_new((size_t)1 << 20);
    return default_arena;
}
