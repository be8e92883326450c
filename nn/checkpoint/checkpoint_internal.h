/* Shared by nn/checkpoint/checkpoint.c (reports, HDF5 errors, saving) and nn/checkpoint/checkpoint_load.c. */
#ifndef AG_NN_CHECKPOINT_INTERNAL_H
#define AG_NN_CHECKPOINT_INTERNAL_H

#include "../../tensor/op.h"
#include <hdf5.h>

#include "checkpoint.h"

#define FORMAT_NAME "attograd-checkpoint"
/* format_version 2 (what a save writes): HDF5's 1.10 format, contiguous datasets each with a
 * "crc32" attribute, fixed-length strings. Version 1 (chunked, Fletcher32, variable-length
 * strings, no crc32 attributes) still loads. */
#define FORMAT_VERSION 2
#define FORMAT_VERSION_MIN 1
/* the attribute of every format 2 dataset: the CRC-32 (zlib's) of its data's little-endian bytes */
#define AG_CK_CRC_ATTR "crc32"
/* the superblock version of HDF5's 1.10 format, every one of whose metadata structures carries
 * a checksum; format 1 files have version 2 */
#define AG_CK_SUPERBLOCK 3
/* links and attributes per group kept in its object header (HDF5's largest compact count) */
#define COMPACT_MAX 65535

/* The user block at the start of every file, where libhdf5 reads nothing: AG_CK_MAGIC, then
 * "length N\ncrc32 XXXXXXXX\n" (the file's length in bytes and the CRC-32 of every byte after
 * the user block, as zlib.crc32 computes it), then zeros. */
#define AG_CK_HEADER 512
#define AG_CK_MAGIC "attograd-checkpoint\n"

/* Steps, epochs and data positions, in the file and in a state to be saved: 0 to 2^53, where a
 * double still counts them exactly. */
#define AG_CK_COUNT_MAX ((int64_t)1 << 53)

/* CRC-32 (zlib's) of n bytes continuing crc (0 to start); after ag__ck_begin. */
uint32_t ag__ck_crc32(uint32_t crc, const void *data, size_t n);
/* CRC-32 of n elements of es bytes as their little-endian bytes (what a "crc32" attribute holds) */
uint32_t ag__ck_crc32_le(const void *data, size_t n, size_t es);

/* ---- the report: every problem found, joined into one message ----------------------------- */

/* Severity of a problem; the worst one decides the status. SKIP problems are what a non-strict
 * load leaves out (a missing, unexpected or misshapen tensor); the rest always fail. */
enum { SKIP = 1, MISMATCH, FORMAT, IO, INVAL, NOMEM };

typedef struct {
    char text[8192];
    size_t len;
    int count, omitted, worst;
    /* how the file is read: its format_version (0 until known); trusted: libhdf5 parses it in
     * this process because its header matched and it is in the checksummed 1.10 format, so
     * anything whose bytes HDF5 does not checksum (a variable-length string, an old-style group,
     * a chunk index, a format 1 file) is not read but sets retry: the file is then read again
     * the way of a file without a header (first in a child process) */
    int version;
    bool trusted, retry;
} report;

typedef struct {
    H5E_auto2_t fn;
    void *data;
} hush_t;

typedef struct {
    char desc[300];
    hid_t minor;
} cause_t;

/* Record a problem; returns false, so that "return problem(...)" reads as failing. */
bool ag__ck_problem(report *r, int severity, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ag_checkpoint_status ag__ck_report_status(const report *r, bool strict);
/* "<path>: <problem>" or "<path>: <lead>N problems: <p1>; <p2>; ..." into msg */
void ag__ck_report_write(const report *r, const char *path, const char *lead, char *msg, size_t size);
/* Start a save or load: one at a time (Debian's libhdf5 is the serial build, not thread-safe),
 * with HDF5's error printing off (messages quote its innermost error text instead). */
hush_t ag__ck_begin(void);
/* End it: HDF5's error printing as it was, its free lists and malloc's free memory given back. */
void ag__ck_end(hush_t h);
/* The innermost entry of HDF5's error stack (the actual cause), then clear the stack. */
cause_t ag__ck_cause(void);
const char *ag__ck_type_desc(hid_t ty, char *buf);
char *ag__ck_dims_str(int nd, const hsize_t *dims, char *buf);
const char *ag__ck_kind_name(ag_optim_kind k);
/* Append a copy of *e to s's config (its string, if any, is taken over); false on out of
 * memory, nothing reported (the loader must not go through ag_error). nn/checkpoint/train_state.c. */
bool ag__config_append(ag_train_state *s, const ag_config_entry *e);
/* What a read fills (nn/checkpoint/checkpoint_load.c): the parameters into model (a slab of
 * params, when params is given), the optimizer's hyperparameters into *so and its state slabs
 * into optim[k] (when opt is given), the training state into *state (when given); with all,
 * every dataset of /model and /optimizer is read and checked too (ag_checkpoint_verify). */
typedef struct {
    const ag_params *params;
    char *model;
    const ag_optim *opt;
    ag_optim *so;
    char **optim;
    ag_train_state *state;
    bool all;
} read_req;
/* Read path into q's staging memory, between ag__ck_begin and ag__ck_end (checkpoint_load.c):
 * after the header check, in this process when the header vouches for the file, else only
 * once a child process has read it without crashing or hanging. false when r->retry was set:
 * restage and call again with untrusted set (the file is then read as one without a header). */
bool ag__ck_read_file(const char *path, const read_req *q, bool untrusted, report *r);
/* Read path's HDF5 contents (open by name, e.g. /proc/self/fd/N) into q (checkpoint_load.c). */
void ag__ck_read_hdf5(const char *name, const read_req *q, size_t file_size, report *r);
/* Run ag__ck_read_hdf5(name, q, ...) in a forked child first: true when it finished and the
 * caller may read the file itself; false with the problem reported when libhdf5 crashed or
 * hung in it, or when it found a problem that fails every load (its report is taken then:
 * reading again would find the same). nn/checkpoint/guard.c. */
bool ag__ck_child_read(const char *name, const read_req *q, size_t file_size, report *r);
/* Read back the file a save wrote and compare it with what was saved; false with IO reported
 * when anything differs or cannot be read. nn/checkpoint/stage.c. */
bool ag__ck_read_back(const char *path, const ag_params *p, const ag_optim *o, const ag_train_state *s, report *r);
/* file access properties: the HDF5 1.8 format (checksummed metadata), no file locking */
hid_t ag__ck_fapl_new(void);

#endif
