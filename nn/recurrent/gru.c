/* GRU cell and GRU layers as fused ops, and additive / dot-product attention (nn/recurrent/gru.h).
 *
 * A layer direction is ag_linear over all time steps (the input projection, one GEMM) followed
 * by one recurrence node whose output is (L+1, N, H): rows 0..L-1 are the per-step outputs, row
 * L the final hidden state, so output and h_n are two views of one node. Its backward runs
 * backpropagation through time with one GEMM per step for dh and one GEMM over all steps for
 * dW_hh. Per-row gate arithmetic is one kernel body per dtype; every output element is computed
 * by one thread with a fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <tgmath.h>

#include "../../tensor/op.h"
#include "gru.h"
#include "../nn_internal.h"

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* C (m×n, rows ldc apart) = beta·C + op(A) op(B) for row-major A, B with leading dims lda, ldb */
static void gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    ag__gemm(dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

/* ---- kernels: step_fwd_f32, step_bwd_f32, col_sums_f32, add_scores_fwd_f32, ... ---- */
#define T float
#define FN(name) name##_f32
#include "gru_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "gru_kernels.inc"
#undef T
#undef FN

typedef struct {
    void (*step_fwd)(int64_t, int64_t, const void *, int64_t, const void *, const void *, const void *, const void *,
                     int64_t, void *, void *, void *, const uint8_t *);
    void (*step_bwd)(int64_t, int64_t, const void *, const void *, const void *, const void *, void *, int64_t, void *,
                     void *, const uint8_t *);
    void (*col_sums)(const void *, int64_t, int64_t, void *);
} kernels;
static const kernels K32 = {step_fwd_f32, step_bwd_f32, col_sums_f32};
static const kernels K64 = {step_fwd_f64, step_bwd_f64, col_sums_f64};
static const kernels *kern(ag_dtype dt) { return dt == AG_F32 ? &K32 : &K64; }

static const void *ptr_or_null(const ag_tensor *t) { return t ? ag__ptr(t) : NULL; }

/* ==== GRU cell: one fused op ================================================================ */

static void cell_backward(ag_node *n) { /* saved: x, h, gates, w_ih, w_hh (dense) */
    ag_tensor *x = n->saved[0], *h = n->saved[1], *gates = n->saved[2], *wih = n->saved[3];
    ag_tensor *whh = ag__dense(n->in[3]), *g = n->out->grad;
    ag_dtype dt = g->dtype;
    int64_t N = g->shape[0], H = g->shape[1], IN = x->shape[1];
    ag_tensor *dgi = ag_zeros(dt, AG_SHAPE(N, 3 * H)), *dgh = ag__new(dt, AG_SHAPE(N, 3 * H));
    ag_tensor *dz = ag__new(dt, AG_SHAPE(N, H));
    kern(dt)->step_bwd(N, H, ag__ptr(g), NULL, ag__ptr(gates), ag__ptr(h), ag__ptr(dgi), 3 * H, ag__ptr(dgh),
                       ag__ptr(dz), NULL);
    ag_tensor *dx = ag_grad_buffer(n->in[0]), *dh = ag_grad_buffer(n->in[1]), *dwih = ag_grad_buffer(n->in[2]);
    ag_tensor *dwhh = ag_grad_buffer(n->in[3]), *dbih = ag_grad_buffer(n->in[4]), *dbhh = ag_grad_buffer(n->in[5]);
    if (dx) gemm(dt, false, false, N, IN, 3 * H, ag__ptr(dgi), 3 * H, ag__ptr(wih), IN, 1, ag__ptr(dx), IN);
    if (dh) {
        ag__add_into(dh, dz);
        gemm(dt, false, false, N, H, 3 * H, ag__ptr(dgh), 3 * H, ag__ptr(whh), H, 1, ag__ptr(dh), H);
    }
    if (dwih) gemm(dt, true, false, 3 * H, IN, N, ag__ptr(dgi), 3 * H, ag__ptr(x), IN, 1, ag__ptr(dwih), IN);
    if (dwhh) gemm(dt, true, false, 3 * H, H, N, ag__ptr(dgh), 3 * H, ag__ptr(h), H, 1, ag__ptr(dwhh), H);
    if (dbih) kern(dt)->col_sums(ag__ptr(dgi), N, 3 * H, ag__ptr(dbih));
    if (dbhh) kern(dt)->col_sums(ag__ptr(dgh), N, 3 * H, ag__ptr(dbhh));
}
/* x, h, w_ih, w_hh (the saved dense ones are those themselves when contiguous); not the biases */
static const ag_op GRU_CELL = {"ag_gru_cell", cell_backward,
                               AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(2) | AG_SAVES_INPUT(3)};

/* same dtype as ref; reports otherwise */
static bool same_dtype(const char *op, const ag_tensor *ref, int n, ag_tensor *const *ts, const char *const *names) {
    for (int i = 0; i < n; i++)
        if (ts[i] && ts[i]->dtype != ref->dtype) {
            char b[128];
            ag_error(op, "%s %s is %s, expected %s like the input (convert with ag_to)", names[i],
                     ag_shape_str(ts[i], b), ag_dtype_name(ts[i]->dtype), ag_dtype_name(ref->dtype));
            return false;
        }
    return true;
}

ag_tensor *ag_gru_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                       ag_tensor *b_hh) {
    const char *op = "ag_gru_cell";
    if (!ag__check_float(op, x) || !ag__check_float(op, w_ih) || !ag__check_float(op, w_hh) ||
        (h && !ag__check_float(op, h)) || (b_ih && !ag__check_float(op, b_ih)) || (b_hh && !ag__check_float(op, b_hh)))
        return NULL;
    if (!same_dtype(op, x, 5, (ag_tensor *[]){h, w_ih, w_hh, b_ih, b_hh},
                    (const char *[]){"hx", "weight_ih", "weight_hh", "bias_ih", "bias_hh"}))
        return NULL;
    char b1[128], b2[128], b3[128], b4[128], b5[128], b6[128];
    int64_t H = w_hh->shape[0] / 3;
    bool unbatched = x->ndim == 1;
    int64_t N = unbatched ? 1 : x->shape[0], IN = x->shape[x->ndim - 1];
    bool ok = (x->ndim == 1 || x->ndim == 2) && w_ih->ndim == 2 && w_hh->ndim == 2 && w_hh->shape[0] % 3 == 0 &&
              w_hh->shape[1] == H && w_ih->shape[0] == 3 * H && w_ih->shape[1] == IN &&
              (!b_ih || (b_ih->ndim == 1 && b_ih->shape[0] == 3 * H)) &&
              (!b_hh || (b_hh->ndim == 1 && b_hh->shape[0] == 3 * H)) &&
              (!h || (h->ndim == x->ndim && h->shape[h->ndim - 1] == H && (unbatched || h->shape[0] == N)));
    if (!ok) {
        ag_error(op, "input %s, hx %s, weight_ih %s, weight_hh %s, bias_ih %s, bias_hh %s: expected input (N,in) or "
                     "(in), hx like (N,H), weight_ih (3H,in), weight_hh (3H,H), biases (3H)",
                 ag_shape_str(x, b1), h ? ag_shape_str(h, b2) : "none", ag_shape_str(w_ih, b3), ag_shape_str(w_hh, b4),
                 b_ih ? ag_shape_str(b_ih, b5) : "none", b_hh ? ag_shape_str(b_hh, b6) : "none");
        return NULL;
    }
    if (unbatched) {
        ag_tensor *y = ag_gru_cell(ag_unsqueeze(x, 0), h ? ag_unsqueeze(h, 0) : NULL, w_ih, w_hh, b_ih, b_hh);
        return y ? ag_squeeze(y, 0) : NULL;
    }
    ag_dtype dt = x->dtype;
    ag_tensor *in[6] = {x, h, w_ih, w_hh, b_ih, b_hh};
    bool rec = ag_any_requires_grad(6, in);
    ag_tensor *xd = ag__dense(x), *hd = h ? ag__dense(h) : ag_zeros(dt, AG_SHAPE(N, H));
    ag_tensor *wi = ag__dense(w_ih), *wh = ag__dense(w_hh);
    ag_tensor *gi = ag__new(dt, AG_SHAPE(N, 3 * H)), *gh = ag__new(dt, AG_SHAPE(N, 3 * H));
    ag_tensor *y = ag__new(dt, AG_SHAPE(N, H)), *gates = rec ? ag__new(dt, AG_SHAPE(N, 4 * H)) : NULL;
    gemm(dt, false, true, N, 3 * H, IN, ag__ptr(xd), IN, ag__ptr(wi), IN, 0, ag__ptr(gi), 3 * H);
    gemm(dt, false, true, N, 3 * H, H, ag__ptr(hd), H, ag__ptr(wh), H, 0, ag__ptr(gh), 3 * H);
    kern(dt)->step_fwd(N, H, ag__ptr(gi), 3 * H, ptr_or_null(ag__dense(b_ih)), ag__ptr(gh),
                       ptr_or_null(ag__dense(b_hh)), ag__ptr(hd), H, ag__ptr(y), NULL,
                       gates ? ag__ptr(gates) : NULL, NULL);
    ag_node *n = ag_finish(&GRU_CELL, y, 6, in);
    if (n) {
        n->saved[0] = xd;
        n->saved[1] = hd;
        n->saved[2] = gates;
        n->saved[3] = wi;
    }
    return y;
}

/* ==== the recurrence of one layer direction: one fused op over all steps ===================== */

typedef struct {
    const uint8_t *active; /* (L,N): step t of sequence b is real; NULL: all are */
    bool reverse;
} seq_info;

static void seq_backward(ag_node *n) { /* saved: gates (L,N,4H), hprev (L,N,H), w_hh (dense) */
    const seq_info *si = n->extra;
    ag_tensor *gates = n->saved[0], *hprev = n->saved[1], *whh = n->saved[2], *G = n->out->grad;
    ag_dtype dt = G->dtype;
    int64_t L = G->shape[0] - 1, N = G->shape[1], H = G->shape[2];
    size_t es = ag_dtype_size(dt);
    const kernels *k = kern(dt);
    ag_tensor *dgi = ag_grad_buffer(n->in[0]), *dh0 = ag_grad_buffer(n->in[1]);
    ag_tensor *dwhh = ag_grad_buffer(n->in[2]), *dbhh = ag_grad_buffer(n->in[3]);
    ag_tensor *dc = ag__new(dt, AG_SHAPE(N, H)), *dgh = ag__new(dt, AG_SHAPE(max1(L), N, 3 * H));
    memcpy(ag__ptr(dc), ag__ptr(G) + (size_t)(L * N * H) * es, (size_t)(N * H) * es);
    char *gp = ag__ptr(G), *sp = ag__ptr(gates), *hp = ag__ptr(hprev), *dp = ag__ptr(dgh);
    for (int64_t s = L - 1; s >= 0; s--) {
        int64_t t = si->reverse ? L - 1 - s : s;
        k->step_bwd(N, H, ag__ptr(dc), gp + (size_t)(t * N * H) * es, sp + (size_t)(t * N * 4 * H) * es,
                    hp + (size_t)(t * N * H) * es, dgi ? ag__ptr(dgi) + (size_t)(t * N * 3 * H) * es : NULL, 3 * H,
                    dp + (size_t)(t * N * 3 * H) * es, ag__ptr(dc), si->active ? si->active + t * N : NULL);
        if (s > 0 || dh0) /* dh_prev += dgh W_hh */
            gemm(dt, false, false, N, H, 3 * H, dp + (size_t)(t * N * 3 * H) * es, 3 * H, ag__ptr(whh), H, 1,
                 ag__ptr(dc), H);
    }
    if (dh0) ag__add_into(dh0, dc);
    if (dwhh) gemm(dt, true, false, 3 * H, H, L * N, dp, 3 * H, hp, H, 1, ag__ptr(dwhh), H);
    if (dbhh) k->col_sums(dp, L * N, 3 * H, ag__ptr(dbhh));
}
static const ag_op GRU_SEQUENCE = {"ag_gru_sequence", seq_backward, AG_SAVES_INPUT(2)}; /* w_hh; the rest its own */

/* gi (L,N,3H) input projections with b_ih included, h0 (N,H) or NULL, w_hh (3H,H), b_hh (3H) or
 * NULL -> (L+1,N,H): outputs of steps 0..L-1 (0 where inactive), then the final state. Shapes
 * were checked by ag_gru_forward. */
static ag_tensor *gru_sequence(ag_tensor *gi, ag_tensor *h0, ag_tensor *w_hh, ag_tensor *b_hh, const uint8_t *active,
                               bool reverse) {
    ag_dtype dt = gi->dtype;
    int64_t L = gi->shape[0], N = gi->shape[1], H = w_hh->shape[1];
    size_t es = ag_dtype_size(dt);
    ag_tensor *in[4] = {gi, h0, w_hh, b_hh};
    bool rec = ag_any_requires_grad(4, in);
    ag_tensor *gd = ag__dense(gi), *wh = ag__dense(w_hh), *bh = ag__dense(b_hh);
    ag_tensor *y = ag__new(dt, AG_SHAPE(L + 1, N, H)), *gh = ag__new(dt, AG_SHAPE(N, 3 * H));
    ag_tensor *carry = ag__new(dt, AG_SHAPE(N, H));
    ag_tensor *gates = rec ? ag__new(dt, AG_SHAPE(max1(L), N, 4 * H)) : NULL;
    ag_tensor *hprev = rec ? ag__new(dt, AG_SHAPE(max1(L), N, H)) : NULL;
    if (h0) ag__copy(carry, h0);
    else ag__fill(carry, 0.0);
    const kernels *k = kern(dt);
    for (int64_t s = 0; s < L; s++) {
        int64_t t = reverse ? L - 1 - s : s;
        if (hprev) memcpy(ag__ptr(hprev) + (size_t)(t * N * H) * es, ag__ptr(carry), (size_t)(N * H) * es);
        gemm(dt, false, true, N, 3 * H, H, ag__ptr(carry), H, ag__ptr(wh), H, 0, ag__ptr(gh), 3 * H);
        k->step_fwd(N, H, ag__ptr(gd) + (size_t)(t * N * 3 * H) * es, 3 * H, NULL, ag__ptr(gh), ptr_or_null(bh),
                    ag__ptr(carry), H, ag__ptr(carry), ag__ptr(y) + (size_t)(t * N * H) * es,
                    gates ? ag__ptr(gates) + (size_t)(t * N * 4 * H) * es : NULL, active ? active + t * N : NULL);
    }
    memcpy(ag__ptr(y) + (size_t)(L * N * H) * es, ag__ptr(carry), (size_t)(N * H) * es);
    ag_node *n = ag_finish(&GRU_SEQUENCE, y, 4, in);
    if (n) {
        seq_info *si = ag_arena_alloc(ag_arena_current(), sizeof *si);
        *si = (seq_info){active, reverse};
        n->extra = si;
        n->saved[0] = gates;
        n->saved[1] = hprev;
        n->saved[2] = wh;
    }
    return y;
}

/* ==== modules =================================================================================== */

/* weight_ih, weight_hh, bias_ih, bias_hh named with suffix ("" for GRUCell, "_l0_reverse" ...) */
static ag_gru_cell_t cell_params(ag_params *p, const char *prefix, const char *suffix, int64_t in, int64_t H, bool bias,
                                 ag_rng *rng) {
    ag_gru_cell_t c = {NULL, NULL, NULL, NULL, in, H};
    char leaf[128], name[512];
    const char *kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    ag_tensor *t[4] = {NULL};
    for (int i = 0; i < (bias ? 4 : 2); i++) {
        snprintf(leaf, sizeof leaf, "%s%s", kinds[i], suffix);
        ag__param_name(name, sizeof name, "ag_gru", prefix, leaf);
        t[i] = i == 0 ? ag_params_add(p, name, AG_SHAPE(3 * H, in))
             : i == 1 ? ag_params_add(p, name, AG_SHAPE(3 * H, H))
                      : ag_params_add(p, name, AG_SHAPE(3 * H));
        if (!t[i]) return c;
        /* RNNBase.reset_parameters: every parameter U(-1/√H, 1/√H) */
        double bound = H > 0 ? 1.0 / sqrt((double)H) : 0.0;
        ag_uniform_(rng, t[i], -bound, bound);
    }
    c.weight_ih = t[0];
    c.weight_hh = t[1];
    c.bias_ih = t[2];
    c.bias_hh = t[3];
    return c;
}

ag_gru_cell_t ag_gru_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size, bool bias,
                              ag_rng *rng) {
    if (!p || input_size <= 0 || hidden_size <= 0) {
        ag_error("ag_gru_cell_new", "'%s': needs a parameter set and input_size %lld, hidden_size %lld > 0",
                 prefix ? prefix : "", (long long)input_size, (long long)hidden_size);
        return (ag_gru_cell_t){NULL, NULL, NULL, NULL, input_size, hidden_size};
    }
    return cell_params(p, prefix, "", input_size, hidden_size, bias, rng);
}

ag_tensor *ag_gru_cell_forward(const ag_gru_cell_t *m, ag_tensor *x, ag_tensor *h) {
    if (!m || !m->weight_ih) {
        ag_error("ag_gru_cell_forward", "module is NULL or was not created (ag_gru_cell_new failed?)");
        return NULL;
    }
    return ag_gru_cell(x, h, m->weight_ih, m->weight_hh, m->bias_ih, m->bias_hh);
}

ag_gru_config ag_gru_defaults(int64_t input_size, int64_t hidden_size) {
    return (ag_gru_config){.input_size = input_size, .hidden_size = hidden_size, .num_layers = 1, .bias = true};
}

ag_gru_t ag_gru_new(ag_params *p, const char *prefix, const ag_gru_config *cfg, ag_rng *rng) {
    ag_gru_t m;
    memset(&m, 0, sizeof m);
    if (!p || !cfg || cfg->input_size <= 0 || cfg->hidden_size <= 0 || cfg->num_layers < 1 ||
        cfg->num_layers > AG_GRU_MAX_LAYERS || !(cfg->dropout >= 0 && cfg->dropout <= 1)) {
        ag_error("ag_gru_new", "'%s': input_size %lld, hidden_size %lld, num_layers %d, dropout %g: expected a parameter "
                               "set, sizes > 0, 1..%d layers and dropout in [0,1]",
                 prefix ? prefix : "", cfg ? (long long)cfg->input_size : 0LL, cfg ? (long long)cfg->hidden_size : 0LL,
                 cfg ? cfg->num_layers : 0, cfg ? cfg->dropout : 0.0, AG_GRU_MAX_LAYERS);
        return m;
    }
    m.cfg = *cfg;
    int D = cfg->bidirectional ? 2 : 1;
    int64_t H = cfg->hidden_size;
    for (int l = 0; l < cfg->num_layers; l++)
        for (int d = 0; d < D; d++) {
            char suffix[32];
            snprintf(suffix, sizeof suffix, "_l%d%s", l, d ? "_reverse" : "");
            m.layer[l][d] = cell_params(p, prefix, suffix, l == 0 ? cfg->input_size : D * H, H, cfg->bias, rng);
            if (!m.layer[l][d].weight_ih || (cfg->bias && !m.layer[l][d].bias_hh)) {
                memset(&m.layer[0][0], 0, sizeof m.layer[0][0]);
                return m;
            }
        }
    return m;
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
    uint8_t *a = ag_arena_alloc(ag_arena_current(), (size_t)max1(L * N));
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

ag_tensor *ag_gru_forward(const ag_gru_t *m, ag_tensor *x, const ag_gru_args *args, ag_tensor **h_n) {
    const char *op = "ag_gru_forward";
    ag_gru_args none = {0};
    const ag_gru_args *a = args ? args : &none;
    if (h_n) *h_n = NULL;
    if (!m || !m->layer[0][0].weight_ih) {
        ag_error(op, "module is NULL or was not created (ag_gru_new failed?)");
        return NULL;
    }
    if (!ag__check_float(op, x) || (a->h0 && !ag__check_float(op, a->h0))) return NULL;
    const ag_gru_config *c = &m->cfg;
    int D = c->bidirectional ? 2 : 1, NL = c->num_layers;
    int64_t H = c->hidden_size;
    if (!same_dtype(op, m->layer[0][0].weight_ih, 2, (ag_tensor *[]){x, a->h0}, (const char *[]){"input", "h0"}))
        return NULL;
    char b1[128], b2[128];
    bool unbatched = x->ndim == 2;
    if ((x->ndim != 2 && x->ndim != 3) || x->shape[x->ndim - 1] != c->input_size) {
        ag_error(op, "input %s: expected (L,N,%lld), (N,L,%lld) with batch_first, or (L,%lld) unbatched",
                 ag_shape_str(x, b1), (long long)c->input_size, (long long)c->input_size, (long long)c->input_size);
        return NULL;
    }
    ag_tensor *xs = unbatched ? ag_unsqueeze(x, 1) : c->batch_first ? ag_transpose(x, 0, 1) : x; /* (L,N,in) */
    int64_t L = xs->shape[0], N = xs->shape[1];
    ag_tensor *h0 = a->h0;
    if (h0 && (h0->ndim != x->ndim || h0->shape[0] != NL * D || h0->shape[h0->ndim - 1] != H ||
               (!unbatched && h0->shape[1] != N))) {
        ag_error(op, "input %s, h0 %s: expected h0 (%lld,%lld,%lld) (layers*directions, batch, hidden)%s",
                 ag_shape_str(x, b1), ag_shape_str(h0, b2), (long long)(NL * D), (long long)N, (long long)H,
                 unbatched ? " without the batch dim for unbatched input" : "");
        return NULL;
    }
    if (unbatched && a->lengths) {
        ag_error(op, "input %s is unbatched: lengths need a batch (N,L,in) or (L,N,in)", ag_shape_str(x, b1));
        return NULL;
    }
    if (h0 && unbatched) h0 = ag_unsqueeze(h0, 1);
    bool bad;
    const uint8_t *active = active_mask(op, a->lengths, L, N, &bad);
    if (bad) return NULL;

    ag_tensor *in = xs, *hn[2 * AG_GRU_MAX_LAYERS];
    for (int l = 0; l < NL; l++) {
        ag_tensor *outs[2];
        for (int d = 0; d < D; d++) {
            const ag_gru_cell_t *cell = &m->layer[l][d];
            ag_tensor *gi = ag_linear(in, cell->weight_ih, cell->bias_ih);
            ag_tensor *seq = gi ? gru_sequence(gi, h0 ? ag_select(h0, 0, l * D + d) : NULL, cell->weight_hh,
                                               cell->bias_hh, active, d == 1)
                                : NULL;
            if (!seq) return NULL;
            outs[d] = ag_narrow(seq, 0, 0, L);
            hn[l * D + d] = ag_select(seq, 0, L);
        }
        in = D == 2 ? ag_cat(2, outs, 2) : outs[0];
        if (l < NL - 1) in = ag_dropout(in, c->dropout, a->training, a->rng);
        if (!in) return NULL;
    }
    ag_tensor *y = unbatched ? ag_squeeze(in, 1) : c->batch_first ? ag_transpose(in, 0, 1) : in;
    if (h_n) {
        ag_tensor *s = ag_stack(NL * D, hn, 0);
        *h_n = unbatched ? ag_squeeze(s, 1) : s;
    }
    return y;
}

/* ==== attention ================================================================================= */

static void scores_backward(ag_node *n) { /* saved: kp, qp, v (dense) */
    ag_tensor *kp = n->saved[0], *qp = n->saved[1], *v = n->saved[2], *ds = n->out->grad;
    ag_dtype dt = ds->dtype;
    int64_t N = kp->shape[0], S = kp->shape[1], A = kp->shape[2];
    ag_tensor *dkp = ag_grad_buffer(n->in[0]), *dqp = ag_grad_buffer(n->in[1]), *dv = ag_grad_buffer(n->in[2]);
    double *vpart = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)max1(N * A));
    (dt == AG_F32 ? add_scores_bwd_f32 : add_scores_bwd_f64)(N, S, A, ag__ptr(kp), ag__ptr(qp), ag__ptr(v),
                                                              ag__ptr(ds), dkp ? ag__ptr(dkp) : NULL,
                                                              dqp ? ag__ptr(dqp) : NULL, vpart);
    if (!dv) return;
    ag_tensor *sum = ag__new(AG_F64, AG_SHAPE(A));
    double *sp = (double *)ag__ptr(sum);
    for (int64_t i = 0; i < A; i++) sp[i] = 0;
    for (int64_t b = 0; b < N; b++) /* fixed order over the batch */
        for (int64_t i = 0; i < A; i++) sp[i] += vpart[b * A + i];
    ag__add_into(dv, ag_view(ag_to(sum, dt), dv->ndim, dv->shape));
}
static const ag_op ADDITIVE_SCORES = {"ag_additive_scores", scores_backward,
                                      AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(2)};

ag_tensor *ag_additive_scores(ag_tensor *keys_proj, ag_tensor *query_proj, ag_tensor *v) {
    const char *op = "ag_additive_scores";
    if (!ag__check_float(op, keys_proj) || !ag__check_float(op, query_proj) || !ag__check_float(op, v)) return NULL;
    if (!same_dtype(op, keys_proj, 2, (ag_tensor *[]){query_proj, v}, (const char *[]){"query_proj", "v"}))
        return NULL;
    char b1[128], b2[128], b3[128];
    ag_tensor *k = keys_proj, *q = query_proj;
    int64_t A = k->ndim == 3 ? k->shape[2] : -1;
    if (k->ndim != 3 || q->ndim != 2 || q->shape[0] != k->shape[0] || q->shape[1] != A || ag_numel(v) != A ||
        v->shape[v->ndim - 1] != A || v->ndim > 2) {
        ag_error(op, "keys_proj %s, query_proj %s, v %s: expected keys_proj (N,S,A), query_proj (N,A), v (A) or (1,A)",
                 ag_shape_str(k, b1), ag_shape_str(q, b2), ag_shape_str(v, b3));
        return NULL;
    }
    int64_t N = k->shape[0], S = k->shape[1];
    ag_tensor *kd = ag__dense(k), *qd = ag__dense(q), *vd = ag__dense(v);
    ag_tensor *y = ag__new(k->dtype, AG_SHAPE(N, S));
    (k->dtype == AG_F32 ? add_scores_fwd_f32 : add_scores_fwd_f64)(N, S, A, ag__ptr(kd), ag__ptr(qd), ag__ptr(vd),
                                                                   ag__ptr(y));
    ag_node *n = ag_finish(&ADDITIVE_SCORES, y, 3, (ag_tensor *[]){k, q, v});
    if (n) {
        n->saved[0] = kd;
        n->saved[1] = qd;
        n->saved[2] = vd;
    }
    return y;
}

/* query (N,Hq), keys (N,S,Hk), mask (N,S) bool or float or NULL; reports through op */
static bool check_attention(const char *op, ag_tensor *query, ag_tensor *keys, ag_tensor *mask, int64_t Hq,
                            int64_t Hk) {
    if (!ag__check_float(op, query) || !ag__check_float(op, keys)) return false;
    char b1[128], b2[128], b3[128];
    if (query->ndim != 2 || keys->ndim != 3 || query->shape[0] != keys->shape[0] || query->shape[1] != Hq ||
        keys->shape[2] != Hk) {
        ag_error(op, "query %s, keys %s: expected query (N,%lld) and keys (N,S,%lld)", ag_shape_str(query, b1),
                 ag_shape_str(keys, b2), (long long)Hq, (long long)Hk);
        return false;
    }
    if (mask && (mask->ndim != 2 || mask->shape[0] != keys->shape[0] || mask->shape[1] != keys->shape[1])) {
        ag_error(op, "keys %s, key_padding_mask %s: expected the mask (%lld,%lld) (batch, source length)",
                 ag_shape_str(keys, b1), ag_shape_str(mask, b3), (long long)keys->shape[0], (long long)keys->shape[1]);
        return false;
    }
    return same_dtype(op, keys, 1, &query, (const char *[]){"query"});
}

/* scores (N,S) -> weights (N,S), context Σ_j w_j keys_j (N,Hk) */
static ag_tensor *attend(ag_tensor *scores, ag_tensor *keys, ag_tensor *mask, ag_tensor **weights) {
    ag_tensor *w = ag_masked_softmax(scores, mask, -1);
    if (weights) *weights = w;
    return w ? ag_squeeze(ag_matmul(ag_unsqueeze(w, 1), keys), 1) : NULL;
}

ag_additive_attention_t ag_additive_attention_new(ag_params *p, const char *prefix, int64_t query_size,
                                                  int64_t key_size, int64_t attn_size, ag_rng *rng) {
    ag_additive_attention_t m;
    memset(&m, 0, sizeof m);
    m.query_size = query_size, m.key_size = key_size, m.attn_size = attn_size;
    if (!p || query_size <= 0 || key_size <= 0 || attn_size <= 0) {
        ag_error("ag_additive_attention_new", "'%s': query_size %lld, key_size %lld, attn_size %lld: expected a "
                 "parameter set and sizes > 0", prefix ? prefix : "", (long long)query_size, (long long)key_size,
                 (long long)attn_size);
        return m;
    }
    char name[512];
    m.W1 = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "W1"), key_size,
                         attn_size, false, rng);
    m.W2 = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "W2"), query_size,
                         attn_size, false, rng);
    m.v = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "v"), attn_size, 1,
                        false, rng);
    return m;
}

ag_tensor *ag_additive_attention_keys(const ag_additive_attention_t *m, ag_tensor *keys) {
    const char *op = "ag_additive_attention_keys";
    if (!m || !m->v.weight) {
        ag_error(op, "module is NULL or was not created (ag_additive_attention_new failed?)");
        return NULL;
    }
    if (!ag__check_float(op, keys)) return NULL;
    if (keys->ndim != 3 || keys->shape[2] != m->key_size) {
        char b[128];
        ag_error(op, "keys %s: expected (N,S,%lld)", ag_shape_str(keys, b), (long long)m->key_size);
        return NULL;
    }
    return ag_linear(keys, m->W1.weight, NULL);
}

ag_tensor *ag_additive_attention_forward(const ag_additive_attention_t *m, ag_tensor *query, ag_tensor *keys,
                                         ag_tensor *keys_proj, ag_tensor *key_padding_mask, ag_tensor **weights) {
    const char *op = "ag_additive_attention_forward";
    if (weights) *weights = NULL;
    if (!m || !m->v.weight) {
        ag_error(op, "module is NULL or was not created (ag_additive_attention_new failed?)");
        return NULL;
    }
    if (!check_attention(op, query, keys, key_padding_mask, m->query_size, m->key_size)) return NULL;
    if (keys_proj && (keys_proj->ndim != 3 || keys_proj->shape[0] != keys->shape[0] ||
                      keys_proj->shape[1] != keys->shape[1] || keys_proj->shape[2] != m->attn_size)) {
        char b1[128], b2[128];
        ag_error(op, "keys %s, keys_proj %s: expected keys_proj (N,S,%lld) from ag_additive_attention_keys",
                 ag_shape_str(keys, b1), ag_shape_str(keys_proj, b2), (long long)m->attn_size);
        return NULL;
    }
    ag_tensor *kp = keys_proj ? keys_proj : ag_additive_attention_keys(m, keys);
    ag_tensor *scores = ag_additive_scores(kp, ag_linear(query, m->W2.weight, NULL), m->v.weight);
    return scores ? attend(scores, keys, key_padding_mask, weights) : NULL;
}

ag_dot_attention_t ag_dot_attention_new(ag_params *p, const char *prefix, int64_t query_size, int64_t key_size,
                                        bool general, ag_rng *rng) {
    ag_dot_attention_t m = {NULL, query_size, key_size};
    if (query_size <= 0 || key_size <= 0 || (!general && query_size != key_size) || (general && !p)) {
        ag_error("ag_dot_attention_new", "'%s': query_size %lld, key_size %lld, general %d: expected sizes > 0, equal "
                 "for the plain dot score, and a parameter set for the general one", prefix ? prefix : "",
                 (long long)query_size, (long long)key_size, (int)general);
        m.query_size = m.key_size = 0;
        return m;
    }
    if (general) {
        char name[512];
        ag__param_name(name, sizeof name, "ag_dot_attention_new", prefix, "W");
        m.weight = ag_linear_new(p, name, key_size, query_size, false, rng).weight;
    }
    return m;
}

ag_tensor *ag_dot_attention_forward(const ag_dot_attention_t *m, ag_tensor *query, ag_tensor *keys,
                                    ag_tensor *key_padding_mask, ag_tensor **weights) {
    const char *op = "ag_dot_attention_forward";
    if (weights) *weights = NULL;
    if (!m || m->query_size <= 0) {
        ag_error(op, "module is NULL or was not created (ag_dot_attention_new failed?)");
        return NULL;
    }
    if (!check_attention(op, query, keys, key_padding_mask, m->query_size, m->key_size)) return NULL;
    ag_tensor *q = m->weight ? ag_matmul(query, m->weight) : query; /* sᵀW, so W h_j is never formed */
    ag_tensor *scores = ag_squeeze(ag_matmul(keys, ag_unsqueeze(q, -1)), -1);
    return scores ? attend(scores, keys, key_padding_mask, weights) : NULL;
}
