/* Optimizers, gradient clipping and learning-rate schedules against PyTorch 1.13.
 *
 * Expected parameter values were produced with torch 1.13 (/usr/bin/python3), foreach=False,
 * by this script (the C tables below are its output, pasted):
 *
 *   import torch
 *   W0 = [0.5, -1.2, 0.3, 2.0, -0.7, 0.1]; B0 = [0.25, -0.5, 1.5]
 *   GW = [[0.1, -0.2, 0.3, -0.4, 0.5, 0.05], [-0.3, 0.25, 0.0, 0.6, -0.1, 0.2], [0.05, -0.6, 0.45, 0.15, 0.3, -0.25]]
 *   GB = [[1.0, -0.3, 0.02], [0.4, 0.4, -0.9], [-0.2, 0.7, 0.1]]
 *   CASES = [
 *       ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False)),
 *       ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=False)),
 *       ("sgd_nesterov", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True, foreach=False)),
 *       ("adam", lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8, foreach=False)),
 *       ("adam_wd", lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, foreach=False)),
 *       ("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, foreach=False)),
 *   ]
 *   for dt, fmt in ((torch.float32, "%.9g"), (torch.float64, "%.17g")):
 *       for name, make in CASES:
 *           w = torch.tensor(W0, dtype=dt).reshape(2, 3).requires_grad_()
 *           b = torch.tensor(B0, dtype=dt).requires_grad_()
 *           opt = make([w, b])
 *           print("/" "* %s %s *" "/" % (name, str(dt)[6:]))
 *           for k in range(3):
 *               w.grad = torch.tensor(GW[k], dtype=dt).reshape(2, 3)
 *               b.grad = torch.tensor(GB[k], dtype=dt)
 *               opt.step()
 *               print("{" + ", ".join(fmt % v for v in w.detach().flatten().tolist() + b.detach().tolist()) + "},")
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* cmocka 1.1.5 has no assert_double_equal */
#define assert_close(a, b, tol) assert_close_(__FILE__, __LINE__, (a), (b), (tol))
static void assert_close_(const char *file, int line, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) {
        print_error("%s:%d: got %.17g, expected %.17g (tol %g)\n", file, line, got, want, tol);
        fail();
    }
}

static const double W0[6] = {0.5, -1.2, 0.3, 2.0, -0.7, 0.1}, B0[3] = {0.25, -0.5, 1.5};
static const double GW[3][6] = {{0.1, -0.2, 0.3, -0.4, 0.5, 0.05},
                                {-0.3, 0.25, 0.0, 0.6, -0.1, 0.2},
                                {0.05, -0.6, 0.45, 0.15, 0.3, -0.25}};
static const double GB[3][3] = {{1.0, -0.3, 0.02}, {0.4, 0.4, -0.9}, {-0.2, 0.7, 0.1}};

/* after each of the three steps: w (2,3) row-major, then b (3) */
typedef double trajectory[3][9];

static const trajectory SGD_F32 = {
    {0.49000001, -1.18000007, 0.270000011, 2.03999996, -0.75, 0.0949999988, 0.150000006, -0.469999999, 1.49800003},
    {0.520000041, -1.20500004, 0.270000011, 1.9799999, -0.74000001, 0.0749999955, 0.110000007, -0.50999999, 1.58800006},
    {0.515000045, -1.14499998, 0.225000009, 1.96499991, -0.770000041, 0.099999994, 0.13000001, -0.579999983, 1.57800007}};
static const trajectory SGD_MOMENTUM_F32 = {
    {0.489499986, -1.17880011, 0.269700021, 2.03800011, -0.749300003, 0.0949000046, 0.149749994, -0.469500005, 1.49650002},
    {0.50660944, -1.18115914, 0.242187291, 2.016366, -0.783995628, 0.0722245947, 0.0233902074, -0.477627456, 1.57300317},
    {0.517051995, -1.12821925, 0.176707864, 1.9815805, -0.841516078, 0.0742517263, -0.0723546445, -0.547512293, 1.63144028}};
static const trajectory SGD_NESTEROV_F32 = {
    {0.480049998, -1.15972006, 0.242430016, 2.07220006, -0.793669999, 0.0903099999, 0.0595249869, -0.44205001, 1.49335003},
    {0.527632892, -1.18784463, 0.217426404, 1.98504293, -0.813095033, 0.04800741, -0.0977906063, -0.492505103, 1.6586777},
    {0.533387065, -1.07544351, 0.109228238, 1.93019485, -0.895747006, 0.075425148, -0.165135264, -0.634376764, 1.70566511}};
static const trajectory ADAM_F32 = {
    {0.49000001, -1.19000006, 0.290000021, 2.00999999, -0.709999979, 0.0900000036, 0.239999995, -0.49000001, 1.49000001},
    {0.49494192, -1.19162738, 0.283299446, 2.00752306, -0.715110242, 0.0811562389, 0.231014237, -0.491935104, 1.49729073},
    {0.497716904, -1.18658245, 0.275111437, 2.00434661, -0.721755803, 0.0817379355, 0.225352541, -0.498003572, 1.50218642}};
static const trajectory ADAM_WD_F32 = {
    {0.490000069, -1.19000006, 0.290000051, 2.00999999, -0.709999979, 0.0900001675, 0.24000001, -0.490000039, 1.49000001},
    {0.49351576, -1.18715465, 0.283033758, 2.0039134, -0.7129426, 0.0807338655, 0.231173024, -0.491125405, 1.496261},
    {0.493641078, -1.17989171, 0.274353862, 1.99708486, -0.718003631, 0.0815245509, 0.225980431, -0.497251749, 1.49838603}};
static const trajectory ADAMW_F32 = {
    {0.489500016, -1.1888001, 0.289700031, 2.00800014, -0.709299982, 0.0899000019, 0.239749998, -0.489500016, 1.4885},
    {0.493952423, -1.18923867, 0.282709748, 2.00351524, -0.71370095, 0.0809663385, 0.230524495, -0.490945607, 1.49430227},
    {0.496233463, -1.1830045, 0.274239033, 1.99833548, -0.719632804, 0.0814670697, 0.224632278, -0.496523142, 1.49770367}};

static const trajectory SGD_F64 = {
    {0.48999999999999999, -1.1799999999999999, 0.26999999999999996, 2.04, -0.75, 0.095000000000000001,
     0.14999999999999999, -0.46999999999999997, 1.498},
    {0.52000000000000002, -1.2049999999999998, 0.26999999999999996, 1.98, -0.73999999999999999, 0.074999999999999997,
     0.10999999999999999, -0.51000000000000001, 1.5880000000000001},
    {0.51500000000000001, -1.1449999999999998, 0.22499999999999995, 1.9650000000000001, -0.77000000000000002,
     0.10000000000000001, 0.12999999999999998, -0.57999999999999996, 1.5780000000000001}};
static const trajectory SGD_MOMENTUM_F64 = {
    {0.48949999999999999, -1.1787999999999998, 0.2697, 2.0379999999999998, -0.74929999999999997, 0.094899999999999998,
     0.14974999999999999, -0.46949999999999997, 1.4964999999999999},
    {0.50660945000000002, -1.1811590799999998, 0.24218726999999998, 2.0163658, -0.78399562999999994,
     0.072224589999999991, 0.02339022499999999, -0.47762744999999995, 1.5730031499999999},
    {0.51705200649500005, -1.1282192088279999, 0.17670784445699997, 1.98158029078, -0.841516100933,
     0.074251718868999991, -0.072354623702499996, -0.54751229029499993, 1.6314402821649998}};
static const trajectory SGD_NESTEROV_F64 = {
    {0.48004999999999998, -1.1597199999999999, 0.24242999999999998, 2.0722, -0.79366999999999999,
     0.090310000000000001, 0.059524999999999995, -0.44205, 1.49335},
    {0.52763290499999993, -1.187844532, 0.21742638299999997, 1.9850428200000001, -0.81309502700000003, 0.048007411,
     -0.097790597500000034, -0.492505105, 1.6586776349999999},
    {0.5333870619804999, -1.0754434541892, 0.10922820457229995, 1.9301947566420001, -0.89574697374870005,
     0.075425145819099995, -0.16513526061475006, -0.63437678480049997, 1.7056650339934998}};
static const trajectory ADAM_F64 = {
    {0.49000000099999991, -1.1900000005, 0.29000000033333329, 2.0099999997500002, -0.70999999979999995,
     0.090000001999999607, 0.2400000001, -0.4900000003333333, 1.4900000049999975},
    {0.49494189911200653, -1.1916273230448173, 0.28329941810791542, 2.0075229816372322, -0.71511026043006753,
     0.08115623770078309, 0.23101424817228275, -0.49193510436996907, 1.4972907475949921},
    {0.49771688089923066, -1.1865823429679148, 0.27511141418809137, 2.0043466367780245, -0.72175582257981286,
     0.081737931687341198, 0.22535255547312913, -0.4980035869252557, 1.50218639720087}};
static const trajectory ADAM_WD_F64 = {
    {0.4900000666662222, -1.1900000312499024, 0.29000003030293847, 2.0099999500002501, -0.70999997674424009,
     0.090000166663888936, 0.24000000975608804, -0.49000002857134695, 1.4900000588231834},
    {0.49351575045792717, -1.1871546837552485, 0.28303375014005056, 2.0039133651445615, -0.71294258194996585,
     0.080733865580365952, 0.23117301887702146, -0.49112539255408211, 1.4962610505716567},
    {0.49364107088175413, -1.179891681594073, 0.27435385986804889, 1.9970848173042983, -0.7180036377855713,
     0.081524547520723883, 0.22598042871407767, -0.4972517406491696, 1.4983860488326357}};
static const trajectory ADAMW_F64 = {
    {0.48950000099999991, -1.1888000004999999, 0.28970000033333326, 2.00799999975, -0.70929999979999991,
     0.089900001999999604, 0.2397500001, -0.4895000003333333, 1.4885000049999975},
    {0.49395239911100652, -1.1892385230443172, 0.28270971810758205, 2.003514981637482, -0.71370096043026754,
     0.080966337698783086, 0.23052449817218276, -0.49094560436963575, 1.4943022475899921},
    {0.49623342849911967, -1.1830043044443703, 0.27423900446965044, 1.998335121796637, -0.71963282161958264,
     0.081467065347642406, 0.22463228097485696, -0.49652314132055275, 1.49770359494828}};

typedef struct {
    ag_params *p;
    ag_tensor *w, *b;
} model;

/* w (2,3) = W0 and b (3) = B0 in one parameter slab */
static model make_model(ag_dtype dt) {
    model m = {ag_params_new(dt), NULL, NULL};
    m.w = ag_params_add(m.p, "w", AG_SHAPE(2, 3));
    m.b = ag_params_add(m.p, "b", AG_SHAPE(3));
    ag_copy_(m.w, ag_wrap(AG_F64, AG_SHAPE(2, 3), (void *)W0));
    ag_copy_(m.b, ag_wrap(AG_F64, AG_SHAPE(3), (void *)B0));
    return m;
}

/* the step-k gradients, written straight into the gradient slab (no allocation) */
static void put_grad(ag_params *p, const ag_tensor *t, const double *v, int n) {
    for (int i = 0; i < n; i++) {
        if (p->dtype == AG_F32)
            ((float *)p->grad)[t->offset + i] = (float)v[i];
        else
            ((double *)p->grad)[t->offset + i] = v[i];
    }
}
static void set_grads(model *m, int k) {
    put_grad(m->p, m->w, GW[k], 6);
    put_grad(m->p, m->b, GB[k], 3);
}

static void assert_trajectory(const char *file, int line, ag_optim *opt, model *m, const trajectory expected) {
    double tol = m->p->dtype == AG_F32 ? 1e-6 : 1e-12;
    for (int k = 0; k < 3; k++) {
        set_grads(m, k);
        ag_optim_step(opt);
        assert_int_equal(tu_error_count(), 0);
        assert_int_equal(opt->step, k + 1);
        tu_assert_values_(file, line, m->w, expected[k], 6, tol);
        tu_assert_values_(file, line, m->b, expected[k] + 6, 3, tol);
        /* Stronger than the tolerance: the same roundings as torch (its fused multiply-adds
         * included) give the very same numbers; %.9g / %.17g literals round-trip exactly. */
        for (int i = 0; i < 9; i++) {
            double got = ag_get(i < 6 ? m->w : m->b, (int64_t[]){i < 6 ? i / 3 : i - 6, i % 3});
            bool same = m->p->dtype == AG_F32 ? (float)got == (float)expected[k][i] : got == expected[k][i];
            if (!same) {
                print_error("%s:%d: step %d element %d is %.17g, torch gives %.17g\n", file, line, k + 1, i, got,
                            expected[k][i]);
                fail();
            }
        }
    }
}

typedef ag_optim *(*make_fn)(ag_params *p);

static void run_case(const char *file, int line, make_fn make, const trajectory f32, const trajectory f64) {
    for (int d = 0; d < 2; d++) {
        model m = make_model(d == 0 ? AG_F32 : AG_F64);
        ag_optim *opt = make(m.p);
        assert_non_null(opt);
        assert_trajectory(file, line, opt, &m, d == 0 ? f32 : f64);
        ag_optim_free(opt);
        ag_params_free(m.p);
    }
}
#define RUN_CASE(make, f32, f64) run_case(__FILE__, __LINE__, make, f32, f64)

static ag_optim *make_sgd(ag_params *p) { return ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1}); }
static ag_optim *make_sgd_momentum(ag_params *p) {
    return ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
}
static ag_optim *make_sgd_nesterov(ag_params *p) {
    return ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
}
static ag_optim *make_adam(ag_params *p) {
    return ag_adam_new(p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8});
}
static ag_optim *make_adam_wd(ag_params *p) {
    return ag_adam_new(p, &(ag_adam_config){.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1});
}
static ag_optim *make_adamw(ag_params *p) {
    return ag_adamw_new(p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0.1});
}

static void test_sgd_matches_torch_for_three_steps(void **s) { RUN_CASE(make_sgd, SGD_F32, SGD_F64); }
static void test_sgd_with_momentum_dampening_and_weight_decay_matches_torch(void **s) {
    RUN_CASE(make_sgd_momentum, SGD_MOMENTUM_F32, SGD_MOMENTUM_F64);
}
static void test_sgd_nesterov_matches_torch(void **s) { RUN_CASE(make_sgd_nesterov, SGD_NESTEROV_F32, SGD_NESTEROV_F64); }
static void test_adam_matches_torch_for_three_steps(void **s) { RUN_CASE(make_adam, ADAM_F32, ADAM_F64); }
static void test_adam_with_l2_weight_decay_matches_torch(void **s) { RUN_CASE(make_adam_wd, ADAM_WD_F32, ADAM_WD_F64); }
static void test_adamw_decoupled_weight_decay_matches_torch(void **s) { RUN_CASE(make_adamw, ADAMW_F32, ADAMW_F64); }

/* PyTorch's SGD starts the momentum buffer as a copy of the (decayed) gradient, not as
 * momentum * 0 + (1 - dampening) * gradient: with dampening 0.5 the two differ by a factor 2. */
static void test_sgd_momentum_buffer_starts_as_the_first_gradient(void **s) {
    model m = make_model(AG_F64);
    ag_optim *opt = ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    set_grads(&m, 0);
    ag_optim_step(opt);
    tu_assert_values(ag_optim_state_view(opt, "momentum_buffer", m.b), 0, 1.0, -0.3, 0.02);
    /* p = B0 - 0.1 * g, the full gradient */
    tu_assert_values(m.b, 1e-15, 0.25 - 0.1, -0.5 + 0.03, 1.5 - 0.002);
    /* second step: buf = 0.9 buf + 0.5 g */
    set_grads(&m, 1);
    ag_optim_step(opt);
    tu_assert_values(ag_optim_state_view(opt, "momentum_buffer", m.b), 1e-15, 0.9 + 0.2, -0.27 + 0.2, 0.018 - 0.45);
    ag_optim_free(opt);
    ag_params_free(m.p);
}

/* state slabs carry torch's state_dict names, and a parameter's state sits at its own offset */
static void test_state_slabs_are_named_as_in_torch_and_sliced_per_parameter(void **s) {
    model m = make_model(AG_F32);
    ag_optim *adam = ag_adam_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8});
    ag_optim *sgd = ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9}),
             *plain = ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1});
    void *slab = NULL;
    assert_int_equal(ag_optim_state_count(adam), 2);
    assert_string_equal(ag_optim_state(adam, 0, &slab), "exp_avg");
    assert_ptr_equal(slab, adam->exp_avg);
    assert_string_equal(ag_optim_state(adam, 1, &slab), "exp_avg_sq");
    assert_ptr_equal(slab, adam->exp_avg_sq);
    assert_null(ag_optim_state(adam, 2, &slab));
    assert_int_equal(ag_optim_state_count(sgd), 1);
    assert_string_equal(ag_optim_state(sgd, 0, NULL), "momentum_buffer");
    assert_int_equal(ag_optim_state_count(plain), 0);
    assert_null(plain->momentum_buffer);

    /* after one Adam step exp_avg = 0.1 g and exp_avg_sq = 0.001 g² (f32 roundings as torch) */
    set_grads(&m, 0);
    ag_optim_step(adam);
    ag_tensor *ea = ag_optim_state_view(adam, "exp_avg", m.b), *es = ag_optim_state_view(adam, "exp_avg_sq", m.b);
    tu_assert_shape(ea, 3);
    assert_ptr_equal(ea->data, adam->exp_avg);
    assert_int_equal(ea->offset, m.b->offset);
    tu_assert_values(ea, 1e-8, 0.1, -0.03, 0.002);
    tu_assert_values(es, 1e-9, 0.001, 0.00009, 0.0000004);
    tu_assert_shape(ag_optim_state_view(adam, "exp_avg", m.w), 2, 3);

    assert_null(ag_optim_state_view(plain, "momentum_buffer", m.w));
    tu_assert_error("ag_optim_state_view", "momentum_buffer", "no such state");
    ag_tensor *stranger = ag_zeros(AG_F32, AG_SHAPE(3));
    assert_null(ag_optim_state_view(adam, "exp_avg", stranger));
    tu_assert_error("ag_optim_state_view", "exp_avg", "not a parameter");
    ag_optim_free(adam);
    ag_optim_free(sgd);
    ag_optim_free(plain);
    ag_params_free(m.p);
}

/* Schedules assign opt->lr between steps: p=(.25,...) g=(1,...) lr .1 then .2 gives .15 then -.05 */
static void test_step_uses_the_lr_assigned_between_steps(void **s) {
    model m = make_model(AG_F64);
    ag_optim *opt = ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1});
    set_grads(&m, 0);
    ag_optim_step(opt);
    opt->lr = 0.2;
    ag_optim_step(opt);
    assert_close(ag_get(m.b, (int64_t[]){0}), 0.25 - 0.1 - 0.2, 1e-15);
    opt->lr = -0.1;
    ag_optim_step(opt);
    tu_assert_error("ag_optim_step", "learning rate", "-0.1");
    assert_close(ag_get(m.b, (int64_t[]){0}), 0.25 - 0.1 - 0.2, 1e-15); /* untouched */
    ag_optim_free(opt);
    ag_params_free(m.p);
}

/* Expected values from torch 1.13 with these gradients (GW[0], GB[0]):
 *   w = torch.zeros(2, 3, dtype=dt, requires_grad=True); b = torch.zeros(3, dtype=dt, requires_grad=True)
 *   w.grad = torch.tensor(GW[0], dtype=dt).reshape(2, 3); b.grad = torch.tensor(GB[0], dtype=dt)
 *   n = torch.nn.utils.clip_grad_norm_([w, b], max_norm)   # max_norm 0.5, then 10
 *   print(n.item(), w.grad.flatten().tolist() + b.grad.tolist()) */
static void test_clip_grad_norm_scales_like_torch_and_returns_the_norm_before(void **s) {
    static const double clipped_f32[9] = {0.0390089378, -0.0780178756, 0.117026813, -0.156035751, 0.195044681,
                                          0.0195044689, 0.390089363,  -0.117026813, 0.007801787};
    static const double clipped_f64[9] = {
        0.039008935637027148, -0.078017871274054296, 0.11702680691108142, -0.15603574254810859, 0.19504467818513571,
        0.019504467818513574, 0.39008935637027142,   -0.11702680691108142, 0.0078017871274054284};
    for (int d = 0; d < 2; d++) {
        model m = make_model(d == 0 ? AG_F32 : AG_F64);
        double tol = d == 0 ? 1e-6 : 1e-12;
        const double *want = d == 0 ? clipped_f32 : clipped_f64;
        set_grads(&m, 0);
        double norm = ag_clip_grad_norm(m.p, 0.5);
        assert_close(norm, d == 0 ? 1.28175664 : 1.2817566071606574, tol);
        tu_assert_values_(__FILE__, __LINE__, m.w->grad, want, 6, tol);
        tu_assert_values_(__FILE__, __LINE__, m.b->grad, want + 6, 3, tol);
        /* the clipped gradients now have norm 0.5 / (1 + 1e-6 / norm) */
        assert_close(ag_clip_grad_norm(m.p, 10), 0.5 / (1 + 1e-6 / norm), tol);
        ag_params_free(m.p);
    }
}

static void test_clip_grad_norm_leaves_small_gradients_bit_identical(void **s) {
    for (int d = 0; d < 2; d++) {
        model m = make_model(d == 0 ? AG_F32 : AG_F64);
        set_grads(&m, 0);
        size_t bytes = (size_t)m.p->numel * ag_dtype_size(m.p->dtype);
        char before[256];
        assert_true(bytes <= sizeof before);
        memcpy(before, m.p->grad, bytes);
        /* torch: 1.28175664 (f32), 1.2817566071606574 (f64); gradients unchanged */
        assert_close(ag_clip_grad_norm(m.p, 10), d == 0 ? 1.28175664 : 1.2817566071606574,
                            d == 0 ? 1e-6 : 1e-12);
        assert_memory_equal(before, m.p->grad, bytes);
        /* max_norm equal to the norm: coefficient 1 / (1 + 1e-6 / norm) < 1 still clips, as in torch */
        double norm = ag_clip_grad_norm(m.p, 1.2817566071606574);
        assert_close(norm, 1.2817566071606574, 1e-6);
        assert_true(memcmp(before, m.p->grad, bytes) != 0);
        ag_params_free(m.p);
    }
}

/* the three schedules through ag_lr_schedule_config, by the arguments the tests name */
static double warmup_inv_sqrt(int64_t step, double base_lr, int64_t warmup) {
    ag_lr_schedule_config c = ag_lr_schedule_defaults(AG_LR_WARMUP_INV_SQRT, base_lr);
    c.warmup_steps = warmup;
    return ag_lr_schedule_at(&c, step);
}
static double noam(int64_t step, int64_t d_model, int64_t warmup, double factor) {
    ag_lr_schedule_config c = ag_lr_schedule_defaults(AG_LR_NOAM, factor);
    c.d_model = d_model;
    c.warmup_steps = warmup;
    return ag_lr_schedule_at(&c, step);
}
static double cosine(int64_t step, double base_lr, int64_t warmup, int64_t total, double min_lr) {
    ag_lr_schedule_config c = ag_lr_schedule_defaults(AG_LR_COSINE, base_lr);
    c.warmup_steps = warmup;
    c.total_steps = total;
    c.min_lr = min_lr;
    return ag_lr_schedule_at(&c, step);
}

/* the defaults: warmup 4000 and d_model 512 (the Transformer paper's), no cosine warmup */
static void test_lr_schedule_defaults(void **s) {
    ag_lr_schedule_config c = ag_lr_schedule_defaults(AG_LR_NOAM, 2);
    assert_int_equal(c.kind, AG_LR_NOAM);
    assert_int_equal(c.warmup_steps, 4000);
    assert_int_equal(c.d_model, 512);
    assert_close(ag_lr_schedule_at(&c, 4000), 2 * pow(512 * 4000.0, -0.5), 1e-18);
    c = ag_lr_schedule_defaults(AG_LR_COSINE, 0.5);
    assert_int_equal(c.warmup_steps, 0);
    assert_true(isnan(ag_lr_schedule_at(&c, 1))); /* total_steps must be set */
    tu_assert_error("ag_lr_schedule_at (cosine)", "total_steps 0");
    c.total_steps = 10;
    assert_close(ag_lr_schedule_at(&c, 10), 0, 1e-18);
}

/* hand-worked: base 0.01, warmup 4 */
static void test_warmup_inv_sqrt_rises_linearly_then_decays_as_inverse_sqrt(void **s) {
    assert_close(warmup_inv_sqrt(0, 0.01, 4), 0, 0);
    assert_close(warmup_inv_sqrt(1, 0.01, 4), 0.0025, 1e-18);
    assert_close(warmup_inv_sqrt(2, 0.01, 4), 0.005, 1e-18);
    assert_close(warmup_inv_sqrt(4, 0.01, 4), 0.01, 1e-18);
    assert_close(warmup_inv_sqrt(16, 0.01, 4), 0.005, 1e-18);  /* sqrt(4/16) = 1/2 */
    assert_close(warmup_inv_sqrt(100, 0.01, 4), 0.002, 1e-18); /* sqrt(4/100) = 1/5 */
}

/* hand-worked: d_model 16 (16^-0.5 = 1/4), warmup 4 (4^-1.5 = 1/8), factor 2 */
static void test_noam_schedule_is_the_annotated_transformer_rate(void **s) {
    assert_close(noam(1, 16, 4, 2), 2 * 0.25 * 0.125, 1e-18);  /* min(1, 1/8) */
    assert_close(noam(0, 16, 4, 2), 2 * 0.25 * 0.125, 1e-18);  /* step 0 taken as 1 */
    assert_close(noam(2, 16, 4, 2), 2 * 0.25 * 0.25, 1e-18);   /* min(1/sqrt2, 2/8) */
    assert_close(noam(4, 16, 4, 2), 2 * 0.25 * 0.5, 1e-18);    /* min(1/2, 4/8) */
    assert_close(noam(16, 16, 4, 2), 2 * 0.25 * 0.25, 1e-18);  /* min(1/4, 2) */
    /* the same curve as warmup_inv_sqrt with base factor * (d_model * warmup)^-0.5 = 1/4 */
    for (int64_t step = 1; step < 50; step++)
        assert_close(noam(step, 16, 4, 2), warmup_inv_sqrt(step, 0.25, 4), 1e-16);
}

/* hand-worked: base 1, min 0.1, warmup 10, total 110 (cosine over 100 steps) */
static void test_cosine_schedule_warms_up_then_decays_to_min_lr(void **s) {
    assert_close(cosine(0, 1, 10, 110, 0.1), 0, 0);
    assert_close(cosine(5, 1, 10, 110, 0.1), 0.5, 1e-15);
    assert_close(cosine(10, 1, 10, 110, 0.1), 1, 1e-15);
    assert_close(cosine(35, 1, 10, 110, 0.1), 0.1 + 0.45 * (1 + 0.70710678118654752), 1e-15);
    assert_close(cosine(60, 1, 10, 110, 0.1), 0.55, 1e-15); /* cos(pi/2) = 0 */
    assert_close(cosine(110, 1, 10, 110, 0.1), 0.1, 1e-15);
    assert_close(cosine(500, 1, 10, 110, 0.1), 0.1, 0);
    assert_close(cosine(0, 1, 0, 100, 0), 1, 0); /* no warmup: starts at base_lr */
}

static void test_optimizer_step_and_clipping_allocate_nothing(void **s) {
    model m = make_model(AG_F32);
    ag_optim *opts[3] = {make_sgd_nesterov(m.p), make_adam_wd(m.p), make_adamw(m.p)};
    uint64_t before = ag_alloc_count();
    size_t arena = ag_arena_used(ag_arena_current());
    for (int k = 0; k < 3; k++) {
        set_grads(&m, k);
        ag_clip_grad_norm(m.p, 1);
        for (int i = 0; i < 3; i++) ag_optim_step(opts[i]);
    }
    assert_int_equal(ag_alloc_count(), before);
    assert_int_equal(ag_arena_used(ag_arena_current()), arena);
    for (int i = 0; i < 3; i++) ag_optim_free(opts[i]);
    ag_params_free(m.p);
}

/* Run two steps (clipping first) on a slab far above AG_PAR_THRESHOLD with 1 and 2 threads;
 * parameters, state and the returned norm must be bit-identical. */
static void train_big(int threads, ag_dtype dt, int which, void *out_params, void *out_state, double *norms) {
    omp_set_num_threads(threads);
    ag_params *p = ag_params_new(dt);
    ag_tensor *a = ag_params_add(p, "a", AG_SHAPE(300, 257)), *b = ag_params_add(p, "b", AG_SHAPE(1001));
    ag_rng rng = ag_rng_new(7);
    ag_normal_(&rng, a, 0, 1);
    ag_normal_(&rng, b, 0, 1);
    ag_optim *opt =
        which == 0
            ? ag_adam_new(p, &(ag_adam_config){.lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0.01})
            : ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-4});
    for (int k = 0; k < 2; k++) {
        ag_normal_(&rng, a->grad, 0, 1);
        ag_normal_(&rng, b->grad, 0, 1);
        norms[k] = ag_clip_grad_norm(p, 100);
        ag_optim_step(opt);
    }
    size_t bytes = (size_t)p->numel * ag_dtype_size(dt);
    memcpy(out_params, p->data, bytes);
    memcpy(out_state, which == 0 ? opt->exp_avg_sq : opt->momentum_buffer, bytes);
    ag_optim_free(opt);
    ag_params_free(p);
}

static void test_results_do_not_depend_on_the_thread_count(void **s) {
    size_t cap = (300 * 257 + 1001 + 64) * sizeof(double);
    char *p1 = malloc(cap), *s1 = malloc(cap), *p2 = malloc(cap), *s2 = malloc(cap);
    for (int d = 0; d < 2; d++)
        for (int which = 0; which < 2; which++) {
            ag_dtype dt = d == 0 ? AG_F32 : AG_F64;
            double n1[2], n2[2];
            train_big(1, dt, which, p1, s1, n1);
            train_big(2, dt, which, p2, s2, n2);
            size_t bytes = (300 * 257 + 1001) * ag_dtype_size(dt);
            assert_memory_equal(p1, p2, bytes);
            assert_memory_equal(s1, s2, bytes);
            assert_memory_equal(n1, n2, sizeof n1);
            assert_true(n1[0] > 100); /* the clipping path ran */
        }
    omp_set_num_threads(2);
    free(p1), free(s1), free(p2), free(s2);
}

static void test_bad_hyperparameters_are_reported_with_the_value(void **s) {
    model m = make_model(AG_F32);
    assert_null(ag_sgd_new(m.p, &(ag_sgd_config){.lr = -0.1}));
    tu_assert_error("ag_sgd_new", "learning rate", "-0.1");
    assert_null(ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .momentum = -0.5}));
    tu_assert_error("ag_sgd_new", "momentum", "-0.5");
    assert_null(ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .weight_decay = -1e-4}));
    tu_assert_error("ag_sgd_new", "weight_decay", "-0.0001");
    assert_null(ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .nesterov = true}));
    tu_assert_error("ag_sgd_new", "Nesterov momentum requires a momentum and zero dampening", "momentum 0");
    assert_null(ag_sgd_new(m.p, &(ag_sgd_config){.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}));
    tu_assert_error("ag_sgd_new", "Nesterov", "dampening 0.1");
    assert_null(ag_adam_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {1.0, 0.999}, .eps = 1e-8}));
    tu_assert_error("ag_adam_new", "beta1", "1", "[0, 1)");
    assert_null(ag_adam_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, -0.2}, .eps = 1e-8}));
    tu_assert_error("ag_adam_new", "beta2", "-0.2");
    assert_null(ag_adam_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = -1e-8}));
    tu_assert_error("ag_adam_new", "epsilon", "-1e-08");
    assert_null(ag_adam_new(m.p, &(ag_adam_config){.lr = NAN, .betas = {0.9, 0.999}, .eps = 1e-8}));
    tu_assert_error("ag_adam_new", "learning rate", "nan");
    assert_null(
        ag_adamw_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = -0.01}));
    tu_assert_error("ag_adamw_new", "weight_decay", "-0.01");
    assert_null(
        ag_adamw_new(NULL, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0.01}));
    tu_assert_error("ag_adamw_new", "NULL");
    ag_params *empty = ag_params_new(AG_F32);
    assert_null(ag_adam_new(empty, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8}));
    tu_assert_error("ag_adam_new", "empty parameter list");
    assert_true(isnan(ag_clip_grad_norm(m.p, -1)));
    tu_assert_error("ag_clip_grad_norm", "max_norm", "-1");
    assert_true(isnan(warmup_inv_sqrt(5, 0.01, 0)));
    tu_assert_error("ag_lr_schedule_at (warmup_inv_sqrt)", "warmup_steps 0");
    assert_true(isnan(noam(-3, 512, 4000, 1)));
    tu_assert_error("ag_lr_schedule_at (noam)", "step -3");
    assert_true(isnan(cosine(5, 0.01, 10, 10, 0)));
    tu_assert_error("ag_lr_schedule_at (cosine)", "total_steps 10", "warmup_steps 10");
    assert_true(isnan(cosine(5, 0.01, 1, 10, 0.02)));
    tu_assert_error("ag_lr_schedule_at (cosine)", "min_lr", "0.02");
    ag_params_free(empty);
    ag_params_free(m.p);
}

static void test_parameters_added_after_the_optimizer_are_misuse(void **s) {
    model m = make_model(AG_F32);
    ag_optim *opt = make_adam(m.p);
    ag_params_add(m.p, "late", AG_SHAPE(5));
    ag_optim_step(opt);
    tu_assert_error("ag_optim_step", "created for");
    assert_int_equal(opt->step, 0);
    ag_optim_step(NULL);
    tu_assert_error("ag_optim_step", "NULL");
    ag_optim_free(opt);
    ag_params_free(m.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sgd_matches_torch_for_three_steps, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_sgd_with_momentum_dampening_and_weight_decay_matches_torch, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_sgd_nesterov_matches_torch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_adam_matches_torch_for_three_steps, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_adam_with_l2_weight_decay_matches_torch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_adamw_decoupled_weight_decay_matches_torch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_sgd_momentum_buffer_starts_as_the_first_gradient, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_state_slabs_are_named_as_in_torch_and_sliced_per_parameter, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_step_uses_the_lr_assigned_between_steps, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_clip_grad_norm_scales_like_torch_and_returns_the_norm_before, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_clip_grad_norm_leaves_small_gradients_bit_identical, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_inv_sqrt_rises_linearly_then_decays_as_inverse_sqrt, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_noam_schedule_is_the_annotated_transformer_rate, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lr_schedule_defaults, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_cosine_schedule_warms_up_then_decays_to_min_lr, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_optimizer_step_and_clipping_allocate_nothing, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_results_do_not_depend_on_the_thread_count, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_bad_hyperparameters_are_reported_with_the_value, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_parameters_added_after_the_optimizer_are_misuse, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
