/* The recurrence GRU, LSTM and RNN share (nn/recurrent/recurrent_internal.h): the fused cell
 * op, the fused sequence op with its backpropagation through time, the parameters and the
 * layer stack. A kind supplies the per-row gate arithmetic. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "recurrent_internal.h"
#include "../nn_internal.h"

/* C (m×n, rows ldc apart) = beta·C + op(A) op(B) for row-major A, B with leading dims lda, ldb */
static void gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    ag__gemm(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

#define T float
#define FN(name) name##_f32
#include "recurrent_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "recurrent_kernels.inc"
#undef T
#undef FN

static void col_sums(ag_dtype dt, const void *g, int64_t m, int64_t n, void *out) {
    (dt == AG_F32 ? col_sums_f32 : col_sums_f64)(g, m, n, out);
}
static int di(ag_dtype dt) { return dt == AG_F32 ? 0 : 1; }
static const void *ptr_or_null(const ag_tensor *t) { return t ? ag__ptr(t) : NULL; }
static void *ptr_at(const ag_tensor *t, int64_t elems) { return ag__ptr(t) + (size_t)elems * ag_dtype_size(t->dtype); }

ag_recurrent_config ag_recurrent_defaults(int64_t input_size, int64_t hidden_size) {
    return (ag_recurrent_config){.input_size = input_size, .hidden_size = hidden_size, .num_layers = 1, .bias = true};
}

bool ag__same_dtype(const char *op, const ag_tensor *ref, int n, ag_tensor *const *ts, const char *const *names) {
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->dtype != ref->dtype) {
            char b[128];
            ag_error(op, "%s %s is %s, expected %s like the input (convert with ag_to)", names[i],
                     ag_shape_str(ts[i], b), ag_dtype_name(ts[i]->dtype), ag_dtype_name(ref->dtype));
            return false;
        }
    return true;
}

/* ==== one step: a fused op ===================================================================== */

void ag__rnn_cell_backward(ag_node *n) { /* saved: x, h, per-row state, w_ih (dense) */
    const ag__rnn_kind *k = n->extra;
    ag_tensor *x = n->saved[0], *h = n->saved[1], *sv = n->saved[2], *wih = n->saved[3];
    ag_tensor *whh = ag__dense(n->in[4]), *g = ag__dense(n->out->grad);
    ag_dtype dt = g->dtype;
    int64_t N = g->shape[1], H = g->shape[2], IN = x->shape[1], GH = k->gates * H;
    ag_tensor *dgi = ag_zeros(dt, AG_SHAPE(N, GH)), *dgh = ag__new(dt, AG_SHAPE(N, GH));
    ag_tensor *dh = ag__new(dt, AG_SHAPE(N, H)), *dc = k->states == 2 ? ag__new(dt, AG_SHAPE(N, H)) : NULL;
    memcpy(ag__ptr(dh), ag__ptr(g), (size_t)(N * H) * ag_dtype_size(dt));
    if (dc) memcpy(ag__ptr(dc), ptr_at(g, N * H), (size_t)(N * H) * ag_dtype_size(dt));
    k->bwd[di(dt)](N, H, ag__ptr(dh), dc ? ag__ptr(dc) : NULL, NULL, ag__ptr(sv), ag__ptr(h), ag__ptr(dgi), GH,
                   ag__ptr(dgh), NULL);
    ag_tensor *dx = ag_grad_buffer(n->in[0]), *dhb = ag_grad_buffer(n->in[1]), *dcb = ag_grad_buffer(n->in[2]);
    ag_tensor *dwih = ag_grad_buffer(n->in[3]), *dwhh = ag_grad_buffer(n->in[4]);
    ag_tensor *dbih = ag_grad_buffer(n->in[5]), *dbhh = ag_grad_buffer(n->in[6]);
    if (dx) gemm(dt, false, false, N, IN, GH, ag__ptr(dgi), GH, ag__ptr(wih), IN, 1, ag__ptr(dx), IN);
    if (dhb) {
        ag__add_into(dhb, dh);
        gemm(dt, false, false, N, H, GH, ag__ptr(dgh), GH, ag__ptr(whh), H, 1, ag__ptr(dhb), H);
    }
    if (dcb) ag__add_into(dcb, dc);
    if (dwih) gemm(dt, true, false, GH, IN, N, ag__ptr(dgi), GH, ag__ptr(x), IN, 1, ag__ptr(dwih), IN);
    if (dwhh) gemm(dt, true, false, GH, H, N, ag__ptr(dgh), GH, ag__ptr(h), H, 1, ag__ptr(dwhh), H);
    if (dbih) col_sums(dt, ag__ptr(dgi), N, GH, ag__ptr(dbih));
    if (dbhh) col_sums(dt, ag__ptr(dgh), N, GH, ag__ptr(dbhh));
}

ag_tensor *ag__rnn_cell(const ag__rnn_kind *k, const char *op, ag_tensor *x, ag_tensor *h, ag_tensor *c,
                        ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih, ag_tensor *b_hh) {
    if (!ag__check_float(op, x) || !ag__check_float(op, w_ih) || !ag__check_float(op, w_hh) ||
        (h && !ag__check_float(op, h)) || (c && !ag__check_float(op, c)) || (b_ih && !ag__check_float(op, b_ih)) ||
        (b_hh && !ag__check_float(op, b_hh)))
        return NULL;
    if (!ag__same_dtype(op, x, 6, (ag_tensor *[]){h, c, w_ih, w_hh, b_ih, b_hh},
                            (const char *[]){"hx", "cx", "weight_ih", "weight_hh", "bias_ih", "bias_hh"}))
        return NULL;
    char b1[128], b2[128], b3[128], b4[128], b5[128], b6[128], b7[128];
    int G = k->gates;
    int64_t H = w_hh->shape[0] / G;
    bool unbatched = x->ndim == 1;
    int64_t N = unbatched ? 1 : x->shape[0], IN = x->shape[x->ndim - 1];
    bool ok = (x->ndim == 1 || x->ndim == 2) && w_ih->ndim == 2 && w_hh->ndim == 2 && w_hh->shape[0] % G == 0 &&
              w_hh->shape[1] == H && w_ih->shape[0] == G * H && w_ih->shape[1] == IN &&
              (!b_ih || (b_ih->ndim == 1 && b_ih->shape[0] == G * H)) &&
              (!b_hh || (b_hh->ndim == 1 && b_hh->shape[0] == G * H)) && (!c || k->states == 2);
    ag_tensor *st[2] = {h, c};
    for (int i = 0; i < 2; i++)
        ok = ok && (!st[i] || (st[i]->ndim == x->ndim && st[i]->shape[st[i]->ndim - 1] == H &&
                               (unbatched || st[i]->shape[0] == N)));
    if (!ok) {
        ag_error(op, "input %s, hx %s%s%s, weight_ih %s, weight_hh %s, bias_ih %s, bias_hh %s: expected input "
                     "(N,in) or (in), hx%s like (N,H), weight_ih (%dH,in), weight_hh (%dH,H), biases (%dH)",
                 ag_shape_str(x, b1), h ? ag_shape_str(h, b2) : "none", k->states == 2 || c ? ", cx " : "",
                 k->states == 2 || c ? (c ? ag_shape_str(c, b7) : "none") : "", ag_shape_str(w_ih, b3),
                 ag_shape_str(w_hh, b4), b_ih ? ag_shape_str(b_ih, b5) : "none", b_hh ? ag_shape_str(b_hh, b6) : "none",
                 k->states == 2 ? " and cx" : "", G, G, G);
        return NULL;
    }
    if (unbatched) {
        ag_tensor *y = ag__rnn_cell(k, op, ag_unsqueeze(x, 0), h ? ag_unsqueeze(h, 0) : NULL,
                                    c ? ag_unsqueeze(c, 0) : NULL, w_ih, w_hh, b_ih, b_hh);
        return y ? ag_squeeze(y, 1) : NULL;
    }
    ag_dtype dt = x->dtype;
    int S = k->states;
    int64_t GH = G * H;
    ag_tensor *in[7] = {x, h, c, w_ih, w_hh, b_ih, b_hh};
    bool rec = ag_any_requires_grad(7, in);
    ag_tensor *xd = ag__dense(x), *hd = h ? ag__dense(h) : ag_zeros(dt, AG_SHAPE(N, H));
    ag_tensor *cd = S == 2 ? (c ? ag__dense(c) : ag_zeros(dt, AG_SHAPE(N, H))) : NULL;
    ag_tensor *wi = ag__dense(w_ih), *wh = ag__dense(w_hh);
    ag_tensor *gi = ag__new(dt, AG_SHAPE(N, GH)), *gh = ag__new(dt, AG_SHAPE(N, GH));
    ag_tensor *y = ag__new(dt, AG_SHAPE(S, N, H)), *sv = rec ? ag__new(dt, AG_SHAPE(N, k->saved * H)) : NULL;
    gemm(dt, false, true, N, GH, IN, ag__ptr(xd), IN, ag__ptr(wi), IN, 0, ag__ptr(gi), GH);
    gemm(dt, false, true, N, GH, H, ag__ptr(hd), H, ag__ptr(wh), H, 0, ag__ptr(gh), GH);
    k->fwd[di(dt)](N, H, ag__ptr(gi), GH, ptr_or_null(ag__dense(b_ih)), ag__ptr(gh), ptr_or_null(ag__dense(b_hh)),
                   ag__ptr(hd), ptr_or_null(cd), ag__ptr(y), S == 2 ? ptr_at(y, N * H) : NULL, NULL,
                   sv ? ag__ptr(sv) : NULL, NULL);
    ag_node *n = ag_finish(&k->cell_op, y, 7, in);
    if (n) {
        n->extra = (void *)k;
        n->saved[0] = xd;
        n->saved[1] = hd;
        n->saved[2] = sv;
        n->saved[3] = wi;
    }
    return y;
}

/* ==== the recurrence of one layer direction: a fused op over all steps ========================= */

typedef struct {
    const ag__rnn_kind *k;
    const uint8_t *active; /* (L,N): step t of sequence b is real; NULL: all are */
    bool reverse;
} seq_info;

void ag__rnn_seq_backward(ag_node *n) { /* saved: per-row state (L,N,saved·H), hprev (L,N,H), w_hh (dense) */
    const seq_info *si = n->extra;
    const ag__rnn_kind *k = si->k;
    ag_tensor *sv = n->saved[0], *hprev = n->saved[1], *whh = n->saved[2], *G = ag__dense(n->out->grad);
    ag_dtype dt = G->dtype;
    int S = k->states;
    int64_t L = G->shape[0] - S, N = G->shape[1], H = G->shape[2], GH = k->gates * H, SV = k->saved * H;
    size_t es = ag_dtype_size(dt);
    ag_tensor *dgi = ag_grad_buffer(n->in[0]), *dh0 = ag_grad_buffer(n->in[1]), *dc0 = ag_grad_buffer(n->in[2]);
    ag_tensor *dwhh = ag_grad_buffer(n->in[3]), *dbhh = ag_grad_buffer(n->in[4]);
    ag_tensor *dh = ag__new(dt, AG_SHAPE(N, H)), *dc = S == 2 ? ag__new(dt, AG_SHAPE(N, H)) : NULL;
    ag_tensor *dgh = ag__new(dt, AG_SHAPE(max1(L), N, GH));
    memcpy(ag__ptr(dh), ptr_at(G, L * N * H), (size_t)(N * H) * es);
    if (dc) memcpy(ag__ptr(dc), ptr_at(G, (L + 1) * N * H), (size_t)(N * H) * es);
    for (int64_t s = L - 1; s >= 0; s--) {
        int64_t t = si->reverse ? L - 1 - s : s;
        void *dgt = ptr_at(dgh, t * N * GH);
        k->bwd[di(dt)](N, H, ag__ptr(dh), dc ? ag__ptr(dc) : NULL, ptr_at(G, t * N * H), ptr_at(sv, t * N * SV),
                       ptr_at(hprev, t * N * H), dgi ? ptr_at(dgi, t * N * GH) : NULL, GH, dgt,
                       si->active ? si->active + t * N : NULL);
        if (s > 0 || dh0) /* dh_prev += dgh W_hh */
            gemm(dt, false, false, N, H, GH, dgt, GH, ag__ptr(whh), H, 1, ag__ptr(dh), H);
    }
    if (dh0) ag__add_into(dh0, dh);
    if (dc0) ag__add_into(dc0, dc);
    if (dwhh) gemm(dt, true, false, GH, H, L * N, ag__ptr(dgh), GH, ag__ptr(hprev), H, 1, ag__ptr(dwhh), H);
    if (dbhh) col_sums(dt, ag__ptr(dgh), L * N, GH, ag__ptr(dbhh));
}

/* gi (L,N,G·H) input projections with b_ih included, h0, c0 (N,H) or NULL, w_hh (G·H,H), b_hh
 * (G·H) or NULL -> (L+S,N,H): outputs of steps 0..L-1 (0 where inactive), then the final h
 * (and c). Shapes were checked by ag__rnn_forward. */
static ag_tensor *sequence(const ag__rnn_kind *k, ag_tensor *gi, ag_tensor *h0, ag_tensor *c0, ag_tensor *w_hh,
                           ag_tensor *b_hh, const uint8_t *active, bool reverse) {
    ag_dtype dt = gi->dtype;
    int S = k->states;
    int64_t L = gi->shape[0], N = gi->shape[1], H = w_hh->shape[1], GH = k->gates * H, SV = k->saved * H;
    size_t es = ag_dtype_size(dt);
    ag_tensor *in[5] = {gi, h0, c0, w_hh, b_hh};
    bool rec = ag_any_requires_grad(5, in);
    ag_tensor *gd = ag__dense(gi), *wh = ag__dense(w_hh), *bh = ag__dense(b_hh);
    ag_tensor *y = ag__new(dt, AG_SHAPE(L + S, N, H)), *gh = ag__new(dt, AG_SHAPE(N, GH));
    ag_tensor *sv = rec ? ag__new(dt, AG_SHAPE(max1(L), N, SV)) : NULL;
    ag_tensor *hprev = rec ? ag__new(dt, AG_SHAPE(max1(L), N, H)) : NULL;
    /* the state runs in the output's last rows */
    void *h = ptr_at(y, L * N * H), *c = S == 2 ? ptr_at(y, (L + 1) * N * H) : NULL;
    ag_tensor *init[2] = {h0, c0};
    for (int i = 0; i < S; i++) {
        void *dst = i ? c : h;
        if (init[i]) memcpy(dst, ag__ptr(ag__dense(init[i])), (size_t)(N * H) * es);
        else memset(dst, 0, (size_t)(N * H) * es);
    }
    for (int64_t s = 0; s < L; s++) {
        int64_t t = reverse ? L - 1 - s : s;
        if (hprev) memcpy(ptr_at(hprev, t * N * H), h, (size_t)(N * H) * es);
        gemm(dt, false, true, N, GH, H, h, H, ag__ptr(wh), H, 0, ag__ptr(gh), GH);
        k->fwd[di(dt)](N, H, ptr_at(gd, t * N * GH), GH, NULL, ag__ptr(gh), ptr_or_null(bh), h, c, h, c,
                       ptr_at(y, t * N * H), sv ? ptr_at(sv, t * N * SV) : NULL, active ? active + t * N : NULL);
    }
    ag_node *n = ag_finish(&k->seq_op, y, 5, in);
    if (n) {
        seq_info *si = ag__alloc(k->seq_op.name, ag_arena_current(), sizeof *si, "the state backward reads");
        if (!si) return NULL;
        *si = (seq_info){k, active, reverse};
        n->extra = si;
        n->saved[0] = sv;
        n->saved[1] = hprev;
        n->saved[2] = wh;
    }
    return y;
}

/* ==== parameters and the layer stack ============================================================ */

ag_recurrent_cell_module ag__rnn_cell_new(ag_params *p, const char *op, const char *prefix, const char *suffix, int gates,
                                     int64_t in, int64_t H, bool bias, ag_rng *rng) {
    ag_recurrent_cell_module c = {NULL, NULL, NULL, NULL, in, H};
    if (!p || in <= 0 || H <= 0) {
        ag_error(op, "'%s': needs a parameter set and input_size %lld, hidden_size %lld > 0", prefix ? prefix : "",
                 (long long)in, (long long)H);
        return c;
    }
    char leaf[128], name[512];
    const char *kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    ag_tensor *w[4] = {NULL};
    int64_t GH = gates * H;
    for (int i = 0; i < (bias ? 4 : 2); i++) {
        snprintf(leaf, sizeof leaf, "%s%s", kinds[i], suffix);
        ag__param_name(name, sizeof name, op, prefix, leaf);
        w[i] = i == 0 ? ag_params_add(p, name, AG_SHAPE(GH, in))
             : i == 1 ? ag_params_add(p, name, AG_SHAPE(GH, H))
                      : ag_params_add(p, name, AG_SHAPE(GH));
        if (!w[i]) return c;
        /* RNNBase.reset_parameters: every parameter U(-1/√H, 1/√H) */
        ag_uniform_(rng, w[i], -1.0 / sqrt((double)H), 1.0 / sqrt((double)H));
    }
    return (ag_recurrent_cell_module){w[0], w[1], w[2], w[3], in, H};
}

bool ag__rnn_stack_new(ag_params *p, const char *op, const char *prefix, const ag_recurrent_config *s, int gates,
                       ag_rng *rng, ag_recurrent_cell_module layer[AG_RECURRENT_MAX_LAYERS][2]) {
    memset(layer, 0, sizeof(ag_recurrent_cell_module) * AG_RECURRENT_MAX_LAYERS * 2);
    if (!p || !s || s->input_size <= 0 || s->hidden_size <= 0 || s->num_layers < 1 ||
        s->num_layers > AG_RECURRENT_MAX_LAYERS || !(s->dropout >= 0 && s->dropout <= 1)) {
        ag_error(op, "'%s': input_size %lld, hidden_size %lld, num_layers %d, dropout %g: expected a parameter set, "
                     "sizes > 0, 1..%d layers and dropout in [0,1]",
                 prefix ? prefix : "", s ? (long long)s->input_size : 0LL, s ? (long long)s->hidden_size : 0LL,
                 s ? s->num_layers : 0, s ? s->dropout : 0.0, AG_RECURRENT_MAX_LAYERS);
        return false;
    }
    int D = s->bidirectional ? 2 : 1;
    int64_t H = s->hidden_size;
    for (int l = 0; l < s->num_layers; l++)
        for (int d = 0; d < D; d++) {
            char suffix[32];
            snprintf(suffix, sizeof suffix, "_l%d%s", l, d ? "_reverse" : "");
            int64_t in = l == 0 ? s->input_size : D * H;
            layer[l][d] = ag__rnn_cell_new(p, op, prefix, suffix, gates, in, H, s->bias, rng);
            if (!layer[l][d].weight_ih || (s->bias && !layer[l][d].bias_hh)) {
                memset(&layer[0][0], 0, sizeof layer[0][0]);
                return false;
            }
        }
    return true;
}

/* lengths (N) i32/i64 in [0, L] -> (L,N) mask of real steps; NULL (no error) when every length
 * is L; *bad set after reporting misuse */
static const uint8_t *active_mask(const char *op, const ag_tensor *lengths, int64_t L, int64_t N, bool *bad) {
    char b[128];
    *bad = false;
    if (!lengths) return NULL;
    if ((lengths->dtype != AG_I64 && lengths->dtype != AG_I32) || lengths->ndim != 1 || lengths->shape[0] != N) {
        ag_error(op, "lengths %s of dtype %s: expected (%lld) i32 or i64, one length per sequence",
                 ag_shape_str(lengths, b), ag_dtype_name(lengths->dtype), (long long)N);
        *bad = true;
        return NULL;
    }
    uint8_t *a = ag__alloc(op, ag_arena_current(), (size_t)max1(L * N), "the steps each sequence takes");
    if (!a) {
        *bad = true;
        return NULL;
    }
    bool all = true;
    for (int64_t i = 0; i < N; i++) {
        int64_t len = (int64_t)ag_get(lengths, (int64_t[]){i});
        if (len < 0 || len > L) {
            ag_error(op, "lengths %s: lengths[%lld] = %lld is outside [0, %lld] (the sequence length)",
                     ag_shape_str(lengths, b), (long long)i, (long long)len, (long long)L);
            *bad = true;
            return NULL;
        }
        all = all && len == L;
        for (int64_t t = 0; t < L; t++) a[t * N + i] = t < len;
    }
    return all ? NULL : a;
}

/* input x and initial states h0, c0 (those given) against s; reported through op */
static bool check_inputs(const ag__rnn_kind *k, const char *op, const ag_recurrent_config *s, ag_tensor *w0,
                         ag_tensor *x, ag_tensor *const st[2], ag_tensor *lengths) {
    const char *names[2] = {"h0", "c0"};
    if (!ag__check_float(op, x)) return false;
    for (int i = 0; i < 2; i++)
        if (st[i] && !ag__check_float(op, st[i])) return false;
    if (!ag__same_dtype(op, w0, 3, (ag_tensor *[]){x, st[0], st[1]}, (const char *[]){"input", "h0", "c0"}))
        return false;
    char b1[128], b2[128];
    bool unbatched = x->ndim == 2;
    if ((x->ndim != 2 && x->ndim != 3) || x->shape[x->ndim - 1] != s->input_size) {
        ag_error(op, "input %s: expected (L,N,%lld), (N,L,%lld) with batch_first, or (L,%lld) unbatched",
                 ag_shape_str(x, b1), (long long)s->input_size, (long long)s->input_size, (long long)s->input_size);
        return false;
    }
    int64_t NL = s->num_layers * (s->bidirectional ? 2 : 1), H = s->hidden_size;
    int64_t N = unbatched ? 1 : x->shape[s->batch_first ? 0 : 1];
    for (int i = 0; i < 2; i++) {
        ag_tensor *t = st[i];
        if (t && i >= k->states) {
            ag_error(op, "%s is given, but %s has no cell state", names[i], k->module);
            return false;
        }
        if (t && (t->ndim != x->ndim || t->shape[0] != NL || t->shape[t->ndim - 1] != H ||
                  (!unbatched && t->shape[1] != N))) {
            ag_error(op, "input %s, %s %s: expected %s (%lld,%lld,%lld) (layers*directions, batch, hidden)%s",
                     ag_shape_str(x, b1), names[i], ag_shape_str(t, b2), names[i], (long long)NL, (long long)N,
                     (long long)H, unbatched ? " without the batch dim for unbatched input" : "");
            return false;
        }
    }
    if (unbatched && lengths) {
        ag_error(op, "input %s is unbatched: lengths need a batch (N,L,in) or (L,N,in)", ag_shape_str(x, b1));
        return false;
    }
    return true;
}

ag_tensor *ag__rnn_forward(const ag__rnn_kind *k, const char *op, const char *new_op, const ag_recurrent_config *s,
                           const ag_recurrent_cell_module (*layer)[2], ag_tensor *x, ag_tensor *h0, ag_tensor *c0,
                           ag_tensor *lengths, bool training, ag_rng *rng, ag_tensor **h_n, ag_tensor **c_n) {
    if (h_n) *h_n = NULL;
    if (c_n) *c_n = NULL;
    if (!layer || !layer[0][0].weight_ih) {
        ag_error(op, "module is NULL or was not created (%s failed?)", new_op);
        return NULL;
    }
    ag_tensor *st[2] = {h0, c0};
    if (!check_inputs(k, op, s, layer[0][0].weight_ih, x, st, lengths)) return NULL;
    int D = s->bidirectional ? 2 : 1, NL = s->num_layers;
    bool unbatched = x->ndim == 2;
    ag_tensor *xs = unbatched ? ag_unsqueeze(x, 1) : s->batch_first ? ag_transpose(x, 0, 1) : x; /* (L,N,in) */
    int64_t L = xs->shape[0], N = xs->shape[1];
    for (int i = 0; i < 2; i++)
        if (st[i] && unbatched) st[i] = ag_unsqueeze(st[i], 1);
    bool bad;
    const uint8_t *active = active_mask(op, lengths, L, N, &bad);
    if (bad) return NULL;

    ag_tensor *in = xs, *fin[2][2 * AG_RECURRENT_MAX_LAYERS];
    for (int l = 0; l < NL; l++) {
        ag_tensor *outs[2];
        for (int d = 0; d < D; d++) {
            const ag_recurrent_cell_module *cw = &layer[l][d];
            ag_tensor *gi = ag_linear(in, cw->weight_ih, cw->bias_ih);
            ag_tensor *h_init = st[0] ? ag_select(st[0], 0, l * D + d) : NULL;
            ag_tensor *c_init = st[1] ? ag_select(st[1], 0, l * D + d) : NULL;
            ag_tensor *seq = gi ? sequence(k, gi, h_init, c_init, cw->weight_hh, cw->bias_hh, active, d == 1) : NULL;
            if (!seq) return NULL;
            outs[d] = ag_narrow(seq, 0, 0, L);
            for (int i = 0; i < k->states; i++) fin[i][l * D + d] = ag_select(seq, 0, L + i);
        }
        in = D == 2 ? ag_cat(2, outs, 2) : outs[0];
        if (l < NL - 1 && in) { /* (L,N,*): the samples along dim 1 */
            ag__mask_place m = ag__place_dense(in->ndim, in->shape, 1);
            in = ag__dropout_placed(in, s->dropout, training, rng, false, false, &m);
        }
        if (!in) return NULL;
    }
    ag_tensor *y = unbatched ? ag_squeeze(in, 1) : s->batch_first ? ag_transpose(in, 0, 1) : in;
    ag_tensor **outs[2] = {h_n, c_n};
    for (int i = 0; i < k->states; i++)
        if (outs[i]) {
            ag_tensor *t = ag_stack(NL * D, fin[i], 0);
            *outs[i] = unbatched ? ag_squeeze(t, 1) : t;
        }
    return y;
}
