/* The Transformer's encoder layer and encoder stack (torch 1.13's TransformerEncoderLayer and
 * TransformerEncoder). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"
#include "transformer.h"
#include "transformer_internal.h"

/* Modules are registered in torch's __init__ order, which is the state_dict order. */
ag_transformer_encoder_layer_module ag_transformer_encoder_layer_new(ag_params *p, const char *prefix,
                                                                const ag_transformer_config *cfg, ag_rng *rng) {
    ag_transformer_encoder_layer_module m;
    memset(&m, 0, sizeof m);
    if (!ag__tf_check_config("ag_transformer_encoder_layer_new", prefix, cfg)) return m;
    m.cfg = *cfg;
    /* each module only when the one before was made: the first failure is the one report */
    bool ok = (m.self_attn = ag__tf_attn_new(p, prefix, "self_attn", cfg, rng)).in_proj_weight &&
              (m.linear1 = ag__tf_linear_new(p, prefix, "linear1", cfg->d_model, cfg->dim_feedforward, rng)).weight &&
              (m.linear2 = ag__tf_linear_new(p, prefix, "linear2", cfg->dim_feedforward, cfg->d_model, rng)).weight &&
              (m.norm1 = ag__tf_norm_new(p, prefix, "norm1", cfg)).weight &&
              (m.norm2 = ag__tf_norm_new(p, prefix, "norm2", cfg)).weight;
    if (!ok) m.self_attn.in_proj_weight = NULL;
    return m;
}

/* ---- forward ---- */

/* A checked encoder call: the batched input, its key padding mask and, with skip_padding, the
 * rows it runs on (r, else NULL). Checked once for a stack: its layers share one config. */
typedef struct {
    seq s;
    ag_tensor *kpm;
    ag__rowset rs;
    const ag__rowset *r;
    bool unbatched;
} enc_call;

static bool enc_prepare(const char *op, const ag_transformer_config *c, ag_tensor *src, const ag_transformer_args *a,
                        enc_call *e) {
    if (!ag__tf_check_seq(op, "src", src, c, &e->s)) return false;
    e->unbatched = src->ndim == 2;
    e->kpm = a->src_key_padding_mask;
    if (!ag__tf_check_masks(op, "src_mask", a->src_mask, "src_key_padding_mask", &e->kpm, e->unbatched, e->s.n,
                            c->nhead, e->s.len, e->s.len))
        return false;
    e->r = c->skip_padding && e->kpm && ag__live_rows(e->kpm, c->batch_first, &e->rs) ? &e->rs : NULL;
    return true;
}

/* self_attn and feed-forward blocks of an encoder layer on x (e's rows) */
static ag_tensor *enc_layer_run(const ag_transformer_encoder_layer_module *m, ag_tensor *x, const enc_call *e,
                                const ag_transformer_args *a) {
    const ag_transformer_config *c = &m->cfg;
    ag__tf_block sa = {.attn = &m->self_attn, .mask = a->src_mask, .kpm = e->kpm, .causal = a->src_is_causal,
                       .qr = e->r, .kr = e->r};
    ag__tf_block ff = {.l1 = &m->linear1, .l2 = &m->linear2, .qr = e->r};
    TRY(x = ag__tf_residual(x, &m->norm1, &sa, c, a));
    return ag__tf_residual(x, &m->norm2, &ff, c, a);
}

ag_tensor *ag_transformer_encoder_layer_forward(const ag_transformer_encoder_layer_module *m, ag_tensor *src,
                                                const ag_transformer_args *args) {
    const char *op = "ag_transformer_encoder_layer_forward";
    if (!m || !m->self_attn.in_proj_weight) {
        ag_error(op, "module is NULL or was not created (ag_transformer_encoder_layer_new failed?)");
        return NULL;
    }
    ag_transformer_args none = {0};
    const ag_transformer_args *a = args ? args : &none;
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    enc_call e;
    if (!enc_prepare(op, &m->cfg, src, a, &e)) return NULL;
    ag_tensor *x = ag__tf_rows_in(&e.s, e.r);
    TRY(x);
    TRY(x = enc_layer_run(m, x, &e, a));
    return ag__tf_layer_result(mark, ag__tf_rows_out(x, &e.s, e.r, e.unbatched, &m->cfg), false);
}

/* ---- stack ---- */

static bool new_encoder_layer(void *layers, int l, ag_params *p, const char *name, const ag_transformer_config *cfg,
                              ag_rng *rng) {
    ag_transformer_encoder_layer_module *m = (ag_transformer_encoder_layer_module *)layers + l;
    *m = ag_transformer_encoder_layer_new(p, name, cfg, rng);
    return m->self_attn.in_proj_weight != NULL;
}

ag_transformer_encoder_module ag_transformer_encoder_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                                    int num_layers, bool final_norm, ag_rng *rng) {
    ag_transformer_encoder_module m;
    memset(&m, 0, sizeof m);
    if (!ag__tf_stack_new("ag_transformer_encoder_new", p, prefix, cfg, num_layers, rng, new_encoder_layer, m.layers)) {
        memset(&m, 0, sizeof m);
        return m;
    }
    if (final_norm) m.norm = ag__tf_norm_new(p, prefix, "norm", cfg);
    m.num_layers = num_layers;
    return m;
}

/* A stack checks its input once and, with skip_padding, takes the rows once: its layers and
 * final norm run on them, and only the result is put back in the padded layout. */
ag_tensor *ag_transformer_encoder_forward(const ag_transformer_encoder_module *m, ag_tensor *src,
                                          const ag_transformer_args *args) {
    const char *op = "ag_transformer_encoder_forward";
    if (!m || m->num_layers < 1) {
        ag_error(op, "module is NULL or was not created (ag_transformer_encoder_new failed?)");
        return NULL;
    }
    ag_transformer_args none = {0};
    const ag_transformer_args *a = args ? args : &none;
    const ag_transformer_config *c = &m->layers[0].cfg;
    enc_call e;
    if (!enc_prepare(op, c, src, a, &e)) return NULL;
    ag_tensor *x = ag__tf_rows_in(&e.s, e.r);
    for (int l = 0; l < m->num_layers && x; l++) {
        ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
        x = ag__tf_layer_result(mark, enc_layer_run(&m->layers[l], x, &e, a), false);
    }
    TRY(x);
    if (m->norm.weight) TRY(x = ag_layer_norm_forward(&m->norm, x));
    return ag__tf_rows_out(x, &e.s, e.r, e.unbatched, c);
}
