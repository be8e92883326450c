/* attograd-parity: what an op adapter (ops.c) sees of a case (schema in README.md). */
#ifndef AG_PARITY_H
#define AG_PARITY_H

#include <hdf5.h>

#include "attograd.h"

#define PC_MAX_IO 16

typedef struct parity_case {
    const char *name;
    hid_t group;
    ag_dtype dtype;               /* of float inputs and parameters */
    int nin;
    ag_tensor *in[PC_MAX_IO];     /* NULL for an input marked none */
    ag_params *params;            /* created by the adapter (pc_params), filled by pc_load_params */
    char msg[1024];               /* why the adapter failed */
} parity_case;

/* The case's configuration attributes, with a default when absent. */
int64_t pc_int(parity_case *c, const char *key, int64_t dflt);
double pc_double(parity_case *c, const char *key, double dflt);
bool pc_bool(parity_case *c, const char *key, bool dflt);
/* string attribute into buf; false (buf = dflt) when absent */
bool pc_str(parity_case *c, const char *key, char *buf, size_t size, const char *dflt);
/* Input k, failing the case (msg) when there are fewer; may be NULL for an absent optional input. */
ag_tensor *pc_in(parity_case *c, int k);
/* Parameters of the case's dtype, for the adapter to build its module into. */
ag_params *pc_params(parity_case *c);
/* Copy the file's params/<name> datasets into the module's parameters by name. false (msg set)
 * on a missing or unexpected name or a shape mismatch. */
bool pc_load_params(parity_case *c);
/* Read dataset path (relative to the case) as a tensor of dtype dt; NULL when absent. */
ag_tensor *pc_dataset(parity_case *c, const char *path, ag_dtype dt);

/* An adapter runs the op on the case's inputs and returns its outputs (count, or -1 with msg). */
typedef int (*parity_fn)(parity_case *c, ag_tensor **out);
typedef struct {
    const char *op;
    parity_fn run;
} parity_op;
/* The registry: one table per family of ops (ops.c, ops_*.c), each ending with {NULL, NULL},
 * listed in parity_tables (ops.c). An op name appears once across all of them. */
extern const parity_op parity_tensor_ops[], parity_nn_ops[], parity_transformer_ops[], parity_gru_ops[];
extern const parity_op parity_math_select_ops[];
extern const parity_op parity_nn_losses_options_ops[];
extern const parity_op parity_lstm_ops[];
extern const parity_op *const parity_tables[];

#endif
