/* HDF5 checkpoints: model parameters, optimizer state, training position and model
 * configuration in one file (layout in docs/checkpoint.md; the model's datasets are named by
 * their PyTorch state_dict names, so the file maps onto a state_dict one to one).
 *
 * Files are the outside world: these functions never abort and never report through
 * ag_error. They return a status and write into the caller's buffer a message that names the
 * file and every problem, e.g.
 *   ckpt.h5: dataset 'decoder.layers.0.linear1.weight' has shape (512,128), model expects (256,128)
 * Saving is atomic (build the file in memory, write "<path>.tmp", fsync, read it back and
 * compare with what was saved, rename over path, fsync the directory): a crash at any moment
 * leaves the previous checkpoint or the new one, never a mix, and a failed write (a full disk)
 * is reported with the previous file left as it was. Loading reads and checks everything into
 * staging memory first, so a failed load changes nothing. One writer per path at a time
 * (concurrent saves to one path share the ".tmp" name). Saves and loads from several threads
 * take turns (Debian's libhdf5 is not thread-safe). */
#ifndef AG_NN_CHECKPOINT_H
#define AG_NN_CHECKPOINT_H
#include "../training/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AG_CHECKPOINT_OK = 0,
    AG_CHECKPOINT_PARTIAL = 1,      /* non-strict load: what matched was loaded, msg lists the rest */
    AG_CHECKPOINT_EIO = -1,         /* missing file, unwritable directory, failed write/fsync/rename,
                                 a file that does not read back what was saved */
    AG_CHECKPOINT_EFORMAT = -2,     /* not HDF5, truncated, corrupted, not an attograd checkpoint,
                                 unsupported format_version, malformed attributes */
    AG_CHECKPOINT_EMISMATCH = -3,   /* the file does not fit the model or optimizer: missing or
                                 unexpected names, shapes, dtypes, optimizer kind */
    AG_CHECKPOINT_EINVAL = -4,      /* bad arguments (NULL path, optimizer of another parameter set) */
    AG_CHECKPOINT_ENOMEM = -5,
} ag_checkpoint_status;

/* "ok", "partial", "io error", ... */
AG_API const char *ag_checkpoint_status_name(ag_checkpoint_status s);

/* ---- training state: where training is, and what the model is ---------------------------- */
#define AG_CHECKPOINT_NAME_MAX 64 /* config keys and RNG names, including the NUL */
#define AG_CHECKPOINT_MAX_RNGS 16

typedef enum { AG_CONFIG_INT, AG_CONFIG_DOUBLE, AG_CONFIG_STRING } ag_config_type;

typedef struct {
    char key[AG_CHECKPOINT_NAME_MAX];
    ag_config_type type;
    int64_t i;
    double d;
    char *s; /* AG_CONFIG_STRING: the value, any length, owned by the state; else NULL */
} ag_config_entry;

typedef struct {
    char name[AG_CHECKPOINT_NAME_MAX];
    ag_rng rng;
} ag_named_rng;

/* Zero-initialise it (ag_train_state st = {0};) and release it with ag_train_state_clear. The
 * config is what the model code needs to rebuild the model with no other input (sizes, dropout,
 * activation name, vocabularies, ...): any number of entries, string values of any length.
 * The state owns config and its strings (heap memory): read them, change them only through
 * the functions below. A struct copy (b = a) shares that memory, so clearing one leaves the
 * other dangling: copy with ag_train_state_copy. */
typedef struct ag_train_state {
    int64_t global_step;   /* optimizer updates taken */
    int64_t epoch;
    int64_t data_position; /* where in the epoch's data order the next batch starts */
    int nrng;
    ag_named_rng rng[AG_CHECKPOINT_MAX_RNGS];
    int nconfig;              /* entries, in the order their keys were first set */
    int config_cap;           /* entries allocated */
    ag_config_entry *config;  /* nconfig entries (NULL while there are none) */
} ag_train_state;

/* Free what s owns and zero it (an empty state again). NULL is a no-op. */
AG_API void ag_train_state_clear(ag_train_state *s);
/* Make *dst a deep copy of *src (dst's previous contents freed; dst must be zero-initialised or
 * a state). false (reported through ag_error) on NULL arguments or out of memory; dst is then
 * unchanged. */
AG_API bool ag_train_state_copy(ag_train_state *dst, const ag_train_state *src);
/* Record a copy of *rng under name (replacing one of that name). false (reported through
 * ag_error: these are programming errors) on a NULL argument, an empty or too long name, or
 * when full. */
AG_API bool ag_state_set_rng(ag_train_state *s, const char *name, const ag_rng *rng);
/* Copy the rng recorded under name into *out; false if there is none. */
AG_API bool ag_state_get_rng(const ag_train_state *s, const char *name, ag_rng *out);
/* Set a config entry (replacing one of that key, whatever its type; a new key goes last); false
 * as ag_state_set_rng, for a NULL string, or out of memory (then the state is unchanged).
 * set_string copies value. */
AG_API bool ag_config_set_int(ag_train_state *s, const char *key, int64_t value);
AG_API bool ag_config_set_double(ag_train_state *s, const char *key, double value);
AG_API bool ag_config_set_string(ag_train_state *s, const char *key, const char *value);
/* Remove the entry of key, keeping the others' order; false (nothing reported) when absent. */
AG_API bool ag_config_remove(ag_train_state *s, const char *key);
/* Read a config entry; false (nothing reported) when absent or of another type. get_double
 * also accepts an int entry. get_string returns NULL when absent or not a string; the string
 * belongs to s (valid until that entry is set, removed or s cleared). */
AG_API bool ag_config_get_int(const ag_train_state *s, const char *key, int64_t *out);
AG_API bool ag_config_get_double(const ag_train_state *s, const char *key, double *out);
AG_API const char *ag_config_get_string(const ag_train_state *s, const char *key);

/* ---- save and load ------------------------------------------------------------------------- */
typedef struct {
    /* Skip both fsyncs: still atomic against a crash of the process (rename is), but a power
     * loss may lose the new file's data. For tests and scratch files. */
    bool no_fsync;
} ag_checkpoint_save_opts;

typedef struct {
    /* Like load_state_dict(strict=False): load every parameter and optimizer state whose name
     * and shape match, leave the rest as they are, list the rest in msg and return
     * AG_CHECKPOINT_PARTIAL. Format errors and an optimizer of another kind still fail. */
    bool non_strict;
} ag_checkpoint_load_opts;

/* Save params (required), opt (NULL: no /optimizer) and state (NULL: no /training, /config)
 * to path atomically, in the params' dtype. opts may be NULL. msg (msgsize bytes, may be NULL)
 * receives the message on failure and "" on success. */
AG_API ag_checkpoint_status ag_checkpoint_save(const char *path, const ag_params *params, const ag_optim *opt,
                                         const ag_train_state *state, const ag_checkpoint_save_opts *opts, char *msg,
                                         size_t msgsize);

/* Load path into params, opt and state; each may be NULL to skip that part (params NULL and
 * state non-NULL reads just the training state and config, e.g. to learn how to build the
 * model). Strict unless opts say otherwise: every missing name, unexpected name, shape and
 * dtype problem is reported together. f32 data load into f64 parameters and back (rounded to
 * nearest). opt's hyperparameters and step are restored too (as PyTorch's
 * Optimizer.load_state_dict restores its param_groups); opt must belong to params. state
 * must be zero-initialised or a state: its previous contents are freed and replaced as a whole
 * (release it with ag_train_state_clear). On any status other than OK and PARTIAL nothing was
 * changed. */
AG_API ag_checkpoint_status ag_checkpoint_load(const char *path, ag_params *params, ag_optim *opt, ag_train_state *state,
                                         const ag_checkpoint_load_opts *opts, char *msg, size_t msgsize);

/* Average the parameters of the n checkpoints at paths into params (checkpoint averaging, as
 * fairseq's average_checkpoints.py and Marian's average.py do it): each file's /model is loaded
 * as ag_checkpoint_load loads it, strictly (a name, shape or dtype that does not fit params is
 * refused, naming the file), and params end up holding the element-wise mean, accumulated in
 * double and rounded once to their dtype, so that n copies of one checkpoint give its values
 * back bit for bit. Only parameters are read: optimizer and training state are the caller's to
 * take from one of the files (fairseq and Marian keep the first's) or to leave out. On any
 * status other than OK params are as they were and msg names the file and its problem. */
AG_API ag_checkpoint_status ag_checkpoint_average(const char *const *paths, int n, ag_params *params, char *msg,
                                                  size_t msgsize);

/* What a load trusts, and the check it makes before trusting a file (docs/checkpoint.md):
 * - A file whose header (its first 512 bytes) gives its length and the CRC-32 of its contents
 *   is checked against them before libhdf5 reads a byte. If it is in the format attograd writes
 *   (format_version 2: HDF5's 1.10 format, every metadata structure checksummed by HDF5, every
 *   dataset with a crc32 attribute checked after reading, no variable-length strings), libhdf5
 *   parses it in this process.
 * - Any other file (no header: an earlier attograd, h5py, a hand edit; or content HDF5 does not
 *   checksum) is parsed first in a child process (fork; no OpenMP, no MPI call, _exit), which
 *   is killed after a time limit: a crash or a hang inside libhdf5 becomes one error line.
 *   The environment variable AG_CHECKPOINT_TIMEOUT (seconds) overrides the limit (default
 *   30 s + 1 s per 8 MiB). Only then is it parsed in this process.
 * - Values are checked against the library's ranges; format 2 datasets against their CRC-32.
 *   Format 1 data is trusted as far as HDF5's Fletcher32 checksums go.
 * ag_checkpoint_verify makes that check on a file without a model: the header, the HDF5
 * structure (in a child when needed), the format attributes, every dataset of /model and
 * /optimizer read whole and checked against its crc32 attribute, the training state and
 * config. AG_CHECKPOINT_OK or a status and message as ag_checkpoint_load gives them. */
AG_API ag_checkpoint_status ag_checkpoint_verify(const char *path, char *msg, size_t msgsize);

#ifdef __cplusplus
}
#endif
#endif
