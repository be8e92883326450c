/* Padding, padding masks and teacher forcing (data/data.h). */
#include <string.h>

#include "../tensor/op.h"
#include "data.h"

void ag_pad_row(const int64_t *ids, int64_t len, int64_t width, int64_t pad, int64_t *out) {
    for (int64_t j = 0; j < width; j++) out[j] = j < len ? ids[j] : pad;
}

void ag_teacher_forcing_row(const int64_t *y, int64_t len, int64_t width, int64_t bos, int64_t eos, int64_t pad,
                            int64_t *input, int64_t *target) {
    for (int64_t j = 0; j < width; j++) {
        input[j] = j == 0 ? bos : j <= len ? y[j - 1] : pad;
        target[j] = j < len ? y[j] : j == len ? eos : pad;
    }
}

ag_tensor *ag_pad_sequence(int n, ag_tensor *const *sequences, bool batch_first, double padding_value) {
    const char *op = "ag_pad_sequence";
    char b1[128], b2[128];
    if (n < 1 || !sequences) {
        ag_error(op, "%d sequences: needs at least one", n);
        return NULL;
    }
    int64_t longest = 0;
    for (int i = 0; i < n; i++) {
        ag_tensor *s = sequences[i], *s0 = sequences[0];
        if (!ag__check_not_null(op, s)) return NULL;
        bool same = s->ndim == s0->ndim && s->dtype == s0->dtype && s->ndim >= 1 && s->ndim < AG_MAX_DIMS;
        for (int k = 1; same && k < s->ndim; k++) same = s->shape[k] == s0->shape[k];
        if (!same) {
            ag_error(op, "sequence %d is %s %s, sequence 0 %s %s: each must be (L, *) with the same trailing dims "
                     "and dtype (at most %d dims)", i, ag_shape_str(s, b1), ag_dtype_name(s->dtype),
                     ag_shape_str(s0, b2), ag_dtype_name(s0->dtype), AG_MAX_DIMS - 1);
            return NULL;
        }
        if (s->shape[0] > longest) longest = s->shape[0];
    }
    ag_tensor **padded = ag__alloc(op, ag_arena_current(), sizeof *padded * (size_t)n, "the padded sequences");
    if (!padded) return NULL;
    for (int i = 0; i < n; i++) {
        ag_tensor *s = sequences[i];
        padded[i] = s;
        if (s->shape[0] == longest) continue;
        int64_t shape[AG_MAX_DIMS];
        memcpy(shape, s->shape, sizeof shape);
        shape[0] = longest - s->shape[0];
        ag_tensor *fill = ag_full(s->dtype, s->ndim, shape, padding_value);
        padded[i] = ag_cat(2, (ag_tensor *[]){s, fill}, 0);
        if (!padded[i]) return NULL;
    }
    return ag_stack(n, padded, batch_first ? 0 : 1);
}

ag_tensor *ag_sequence_lengths(int n, ag_tensor *const *sequences) {
    if (n < 0 || (n && !sequences)) {
        ag_error("ag_sequence_lengths", "%d sequences", n);
        return NULL;
    }
    ag_tensor *len = ag_empty(AG_I64, AG_SHAPE(n));
    for (int i = 0; i < n; i++) {
        if (!ag__check_not_null("ag_sequence_lengths", sequences[i])) return NULL;
        ((int64_t *)len->data)[i] = sequences[i]->ndim ? sequences[i]->shape[0] : 1;
    }
    return len;
}

/* lengths (B) i32/i64 as int64 into arena scratch, each in [0, max]; NULL after reporting */
static int64_t *lengths_of(const char *op, ag_tensor *lengths, int64_t max) {
    char b[128];
    if (!ag__check_not_null(op, lengths)) return NULL;
    if (lengths->ndim != 1 || (lengths->dtype != AG_I32 && lengths->dtype != AG_I64)) {
        ag_error(op, "lengths %s %s: expected (B) i32 or i64", ag_shape_str(lengths, b), ag_dtype_name(lengths->dtype));
        return NULL;
    }
    int64_t B = lengths->shape[0];
    int64_t *v = ag__alloc(op, ag_arena_current(), sizeof *v * (size_t)(B ? B : 1), "the lengths");
    if (!v) return NULL;
    ag_to_buffer(lengths, AG_I64, v);
    for (int64_t i = 0; i < B; i++)
        if (v[i] < 0 || v[i] > max) {
            ag_error(op, "lengths[%lld] = %lld is outside [0, %lld]", (long long)i, (long long)v[i], (long long)max);
            return NULL;
        }
    return v;
}

ag_tensor *ag_padding_mask(ag_tensor *lengths, int64_t max_len) {
    const char *op = "ag_padding_mask";
    if (max_len < 0) {
        ag_error(op, "max_len %lld: must be >= 0", (long long)max_len);
        return NULL;
    }
    int64_t *len = lengths_of(op, lengths, max_len);
    if (!len) return NULL;
    int64_t B = lengths->shape[0];
    ag_tensor *mask = ag_empty(AG_BOOL, AG_SHAPE(B, max_len));
    uint8_t *m = (uint8_t *)mask->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < max_len; j++) m[b * max_len + j] = j >= len[b];
    return mask;
}

void ag_teacher_forcing(ag_tensor *y, ag_tensor *lengths, int64_t bos, int64_t eos, int64_t pad, ag_tensor **input,
                        ag_tensor **target) {
    const char *op = "ag_teacher_forcing";
    char b1[128], b2[128];
    if (!input || !target) {
        ag_error(op, "needs both outputs, input and target");
        return;
    }
    *input = *target = NULL;
    if (!ag__check_not_null(op, y)) return;
    if (y->ndim != 2 || y->dtype != AG_I64) {
        ag_error(op, "y %s %s: expected (B, L) i64 token ids", ag_shape_str(y, b1), ag_dtype_name(y->dtype));
        return;
    }
    int64_t B = y->shape[0], L = y->shape[1];
    int64_t *len = lengths_of(op, lengths, L);
    if (!len) return;
    if (lengths->shape[0] != B) {
        ag_error(op, "y %s and lengths %s: one length per row", ag_shape_str(y, b1), ag_shape_str(lengths, b2));
        return;
    }
    int64_t *ids = ag__alloc(op, ag_arena_current(), sizeof *ids * (size_t)(B * L > 0 ? B * L : 1), "the token ids");
    if (!ids) return;
    ag_to_buffer(y, AG_I64, ids);
    ag_tensor *in = ag_empty(AG_I64, AG_SHAPE(B, L + 1)), *out = ag_empty(AG_I64, AG_SHAPE(B, L + 1));
    if (!in || !out) return;
    for (int64_t b = 0; b < B; b++)
        ag_teacher_forcing_row(ids + b * L, len[b], L + 1, bos, eos, pad, (int64_t *)in->data + b * (L + 1),
                               (int64_t *)out->data + b * (L + 1));
    *input = in;
    *target = out;
}
