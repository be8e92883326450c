/* ag_decode_state: a recurrent decoder's tensors kept on the heap across the per-step arena
 * rewind. Per-row slots move with the rows; per-sentence slots are read through the rows'
 * sentences, gathered again only when those change. */
#include <stdlib.h>
#include <string.h>

#include "../../tensor/op.h"
#include "decode.h"

typedef struct {
    bool set, per_sentence;
    ag_dtype dtype;
    int ndim;
    int64_t shape[AG_MAX_DIMS]; /* shape[0]: rows, given at get */
    size_t row_bytes;
    char *data;            /* cap rows, or B sentences */
    char *gathered;        /* per sentence: the current rows' (cap) */
    uint64_t gathered_for; /* the sentence map version gathered is of, 0: none */
} state_slot;

struct ag_decode_state {
    int64_t B, cap, R;
    int64_t *sent;    /* (cap) the sentence each row reads */
    int64_t *idx;     /* (2·cap) reorder scratch: the rows, then their sentences */
    uint64_t version; /* of sent */
    bool identity;    /* row r reads sentence r */
    char *tmp;        /* reorder scratch, cap rows of the widest slot */
    size_t tmp_bytes;
    state_slot slot[AG_DECODE_STATE_SLOTS];
};

ag_decode_state *ag_decode_state_new(int64_t sentences, int64_t max_rows) {
    if (sentences < 1 || max_rows < sentences) {
        ag_error("ag_decode_state_new", "%lld sentences, %lld rows: expected 1 <= sentences <= max_rows",
                 (long long)sentences, (long long)max_rows);
        return NULL;
    }
    ag_decode_state *s = calloc(1, sizeof *s);
    if (s) s->sent = malloc(sizeof(int64_t) * (size_t)max_rows);
    if (s) s->idx = malloc(sizeof(int64_t) * (size_t)max_rows * 2);
    if (!s || !s->sent || !s->idx) {
        if (s) free(s->sent);
        free(s);
        ag_error("ag_decode_state_new", "out of memory for %lld rows", (long long)max_rows);
        return NULL;
    }
    *s = (ag_decode_state){.B = sentences, .cap = max_rows, .R = sentences, .sent = s->sent, .idx = s->idx, .version = 1,
                           .identity = true};
    for (int64_t r = 0; r < max_rows; r++) s->sent[r] = r;
    return s;
}

void ag_decode_state_free(ag_decode_state *s) {
    if (!s) return;
    for (int i = 0; i < AG_DECODE_STATE_SLOTS; i++) {
        free(s->slot[i].data);
        free(s->slot[i].gathered);
    }
    free(s->sent);
    free(s->idx);
    free(s->tmp);
    free(s);
}

int64_t ag_decode_state_rows(const ag_decode_state *s) { return s ? s->R : 0; }

/* the slot's shape (fixed by its first set) for t: false (reported) when it differs */
static bool slot_shape(const char *op, ag_decode_state *s, state_slot *x, ag_tensor *t, bool per_sentence) {
    char b[128];
    int64_t rows = per_sentence ? s->B : s->R;
    bool ok = t->ndim >= 1 && t->shape[0] == rows;
    if (ok && x->set)
        ok = x->per_sentence == per_sentence && x->dtype == t->dtype && x->ndim == t->ndim &&
             memcmp(x->shape + 1, t->shape + 1, sizeof(int64_t) * (size_t)(t->ndim - 1)) == 0;
    if (!ok) {
        ag_error(op, "%s %s: expected %lld %s%s", ag_shape_str(t, b), ag_dtype_name(t->dtype), (long long)rows,
                 per_sentence ? "sentences" : "rows", x->set ? " and the shape and dtype the slot was set with" : "");
        return false;
    }
    if (x->set) return true;
    size_t row = ag_dtype_size(t->dtype);
    for (int d = 1; d < t->ndim; d++) row *= (size_t)t->shape[d];
    x->data = malloc(row * (size_t)(per_sentence ? s->B : s->cap) + 1);
    x->gathered = per_sentence ? malloc(row * (size_t)s->cap + 1) : NULL;
    if (row * (size_t)s->cap > s->tmp_bytes) {
        free(s->tmp);
        s->tmp = malloc(row * (size_t)s->cap + 1);
        s->tmp_bytes = s->tmp ? row * (size_t)s->cap : 0;
    }
    if (!x->data || (per_sentence && !x->gathered) || !s->tmp) {
        ag_error(op, "out of memory for %lld rows of %zu bytes", (long long)s->cap, row);
        free(x->data);
        free(x->gathered);
        x->data = x->gathered = NULL;
        return false;
    }
    *x = (state_slot){.set = true, .per_sentence = per_sentence, .dtype = t->dtype, .ndim = t->ndim,
                      .row_bytes = row, .data = x->data, .gathered = x->gathered};
    memcpy(x->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return true;
}

bool ag_decode_state_set(ag_decode_state *s, int slot, ag_tensor *t, bool per_sentence) {
    const char *op = "ag_decode_state_set";
    if (!s || slot < 0 || slot >= AG_DECODE_STATE_SLOTS) {
        ag_error(op, "slot %d: expected a state and 0 <= slot < %d", slot, AG_DECODE_STATE_SLOTS);
        return false;
    }
    if (!ag__check_not_null(op, t)) return false;
    state_slot *x = &s->slot[slot];
    if (!slot_shape(op, s, x, t, per_sentence)) return false;
    ag_to_buffer(t, t->dtype, x->data);
    x->gathered_for = 0;
    return true;
}

ag_tensor *ag_decode_state_get(ag_decode_state *s, int slot) {
    if (!s || slot < 0 || slot >= AG_DECODE_STATE_SLOTS || !s->slot[slot].set) return NULL;
    state_slot *x = &s->slot[slot];
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[0] = s->R;
    if (!x->per_sentence || s->identity) return ag_wrap(x->dtype, x->ndim, shape, x->data);
    if (x->gathered_for != s->version) {
        for (int64_t r = 0; r < s->R; r++)
            memcpy(x->gathered + (size_t)r * x->row_bytes, x->data + (size_t)s->sent[r] * x->row_bytes, x->row_bytes);
        x->gathered_for = s->version;
    }
    return ag_wrap(x->dtype, x->ndim, shape, x->gathered);
}

bool ag_decode_state_reorder(ag_decode_state *s, ag_tensor *rows) {
    const char *op = "ag_decode_state_reorder";
    char b[128];
    if (!s || !ag__check_not_null(op, rows)) return false;
    int64_t M = rows->ndim == 1 ? rows->shape[0] : 0;
    if (M < 1 || M > s->cap || (rows->dtype != AG_I64 && rows->dtype != AG_I32)) {
        ag_error(op, "rows %s %s: expected (M) integer indices, 1 <= M <= %lld", ag_shape_str(rows, b),
                 ag_dtype_name(rows->dtype), (long long)s->cap);
        return false;
    }
    int64_t *idx = s->idx;
    ag_to_buffer(rows, AG_I64, idx);
    for (int64_t j = 0; j < M; j++)
        if (idx[j] < 0 || idx[j] >= s->R) {
            ag_error(op, "rows[%lld] = %lld: expected a row of the %lld", (long long)j, (long long)idx[j], (long long)s->R);
            return false;
        }
    for (int i = 0; i < AG_DECODE_STATE_SLOTS; i++) {
        state_slot *x = &s->slot[i];
        if (!x->set || x->per_sentence) continue;
        /* only rows that continue another row move; through tmp, so that a row both read and
         * written moves right */
        char *at = s->tmp;
        for (int64_t j = 0; j < M; j++)
            if (idx[j] != j) memcpy(at, x->data + (size_t)idx[j] * x->row_bytes, x->row_bytes), at += x->row_bytes;
        at = s->tmp;
        for (int64_t j = 0; j < M; j++)
            if (idx[j] != j) memcpy(x->data + (size_t)j * x->row_bytes, at, x->row_bytes), at += x->row_bytes;
    }
    int64_t *sent = idx + M;
    bool same = M == s->R, identity = M <= s->B;
    for (int64_t j = 0; j < M; j++) {
        sent[j] = s->sent[idx[j]];
        same &= sent[j] == s->sent[j];
        identity &= sent[j] == j;
    }
    memcpy(s->sent, sent, sizeof(int64_t) * (size_t)M);
    s->R = M;
    s->identity = identity;
    if (!same) s->version++;
    return true;
}
