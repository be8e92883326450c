/* Errors, heap accounting and the arena (bump allocator). */
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
 * after the first reset a step of the same shape runs in one block with no allocation. */

/* Under AddressSanitizer the free space is poisoned (AG_POISON): see internal.h. */

typedef struct block {
    struct block *next;
    size_t size, used;
    char *mem;
} block;

struct ag_arena {
    block *first, *cur;
    size_t total_used;
};

/* NULL when the system cannot provide size bytes */
static block *block_new(size_t size) {
    block *b = ag_xmalloc(sizeof *b);
    b->next = NULL;
    b->size = size;
    b->used = 0;
    if (!(b->mem = ag__try_malloc(size))) {
        ag_xfree(b);
        return NULL;
    }
    AG_POISON(b->mem, size);
    return b;
}

ag_arena *ag_arena_new(size_t initial_bytes) {
    ag_arena *a = ag_xmalloc(sizeof *a);
    a->first = a->cur = block_new(initial_bytes < 4096 ? 4096 : initial_bytes);
    if (!a->first) {
        fprintf(stderr, "attograd: out of memory allocating an arena of %zu bytes\n", initial_bytes);
        abort();
    }
    a->total_used = 0;
    return a;
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

void ag_arena_free(ag_arena *a) {
    if (!a) return;
    free_blocks(a->first);
    ag_xfree(a);
}

void ag_arena_reset(ag_arena *a) {
    if (a->first->next) {
        size_t total = 0;
        for (block *b = a->first; b; b = b->next) total += b->size;
        free_blocks(a->first);
        a->first = block_new(total);
        if (!a->first) {
            fprintf(stderr, "attograd: out of memory allocating an arena block of %zu bytes\n", total);
            abort();
        }
    }
    AG_POISON(a->first->mem, a->first->used);
    a->first->used = 0;
    a->cur = a->first;
    a->total_used = 0;
    ag__threads_between_steps(); /* a step ends: the thread count may follow the load */
}

void *ag_arena_alloc(ag_arena *a, size_t asked) {
    size_t bytes = (asked + 63) & ~(size_t)63;
    block *b = a->cur;
    while (b->used + bytes > b->size && b->next) b = a->cur = b->next; /* blocks kept by a rewind */
    if (bytes < asked) return NULL; /* asked is within 63 bytes of SIZE_MAX */
    if (b->used + bytes > b->size) {
        size_t size = b->size * 2 > bytes ? b->size * 2 : bytes;
        block *next = block_new(size);
        if (!next && size > bytes) next = block_new(size = bytes); /* doubling may ask too much */
        if (!next) return NULL;
        b->next = next;
        b = a->cur = next;
    }
    void *p = b->mem + b->used;
    AG_UNPOISON(p, asked);
    b->used += bytes;
    a->total_used += bytes;
    return p;
}

size_t ag_arena_used(const ag_arena *a) { return a->total_used; }

void ag__drop_pages(const void *from, const void *to) {
#ifdef MADV_DONTNEED
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)from + page - 1) & ~(page - 1), hi = (uintptr_t)to & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: a refusal changes nothing */
#endif
}

void ag_arena_trim(ag_arena *a) {
    for (block *b = a->first; b; b = b->next) ag__drop_pages(b->mem + b->used, b->mem + b->size);
}

ag_arena_mark ag_arena_get_mark(const ag_arena *a) { return (ag_arena_mark){a->cur, a->cur->used, a->total_used}; }

void ag_arena_rewind(ag_arena *a, ag_arena_mark m) {
    block *b = m.block;
    AG_POISON(b->mem + m.used, b->used - m.used);
    b->used = m.used;
    for (block *n = b->next; n; n = n->next) { /* later blocks stay for reuse */
        AG_POISON(n->mem, n->used);
        n->used = 0;
    }
    a->cur = b;
    a->total_used = m.total;
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
