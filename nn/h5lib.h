/* libhdf5, opened on the first checkpoint save or load (nn/h5lib.c).
 *
 * Linked, libhdf5 costs every process that loads libattograd ~7 MiB of resident memory before
 * main(): Debian builds it with curl, a TLS, Kerberos and LDAP stack (35 libraries, 37 000
 * relocations), whether the process ever touches a checkpoint or not. So libattograd does not
 * link it: the checkpoint code calls HDF5 through a table that ag__h5_acquire fills with dlopen
 * and dlsym on first use. The names below are redirected into that table, so the call sites
 * read as plain HDF5. Names are those the object code refers to (H5Eget_auto2,
 * H5T_NATIVE_FLOAT_g, ...), after hdf5.h's macros. A name missing from a list fails the build: a
 * call not redirected is an undefined reference (libattograd does not link libhdf5), a
 * redirect not listed has no field. */
#ifndef AG_NN_H5LIB_H
#define AG_NN_H5LIB_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#define AG__H5_FUNCTIONS(X) \
    X(H5Aclose) X(H5Acreate2) X(H5Aexists) X(H5Aget_space) X(H5Aget_type) X(H5Aiterate2) X(H5Aopen) X(H5Aread) \
    X(H5Awrite) X(H5Dclose) X(H5Dcreate2) X(H5Dget_space) X(H5Dget_type) X(H5Dread) X(H5Dwrite) X(H5Eclear2) \
    X(H5Eget_auto2) X(H5Eset_auto2) X(H5Ewalk2) X(H5Fclose) X(H5Fcreate) X(H5Fflush) X(H5Fis_hdf5) X(H5Fopen) \
    X(H5Gclose) X(H5Gcreate2) X(H5Gget_create_plist) X(H5Gget_info) X(H5Gopen2) X(H5Iget_type) X(H5Lexists) \
    X(H5Lget_name_by_idx) X(H5Literate) X(H5Oclose) X(H5Oopen) X(H5Pclose) X(H5Pcreate) \
    X(H5Pget_attr_creation_order) X(H5Pget_link_creation_order) X(H5Pset_attr_creation_order) X(H5Pset_chunk) \
    X(H5Pset_fclose_degree) X(H5Pset_fletcher32) X(H5Pset_istore_k) \
    X(H5Pset_libver_bounds) X(H5Pset_link_creation_order) X(H5Sclose) X(H5Screate) X(H5Screate_simple) \
    X(H5Sget_simple_extent_dims) X(H5Sget_simple_extent_ndims) X(H5Sget_simple_extent_npoints) \
    X(H5Sget_simple_extent_type) X(H5Tclose) X(H5Tcopy) X(H5Tget_class) X(H5Tget_sign) X(H5Tget_size) \
    X(H5Tget_strpad) X(H5Tis_variable_str) X(H5Tset_cset) X(H5Tset_size) X(H5Tset_strpad) X(H5check_version) \
    X(H5free_memory) X(H5garbage_collect) X(H5open)

/* H5Pset_file_locking came with 1.10.7 (nn/checkpoint.c calls it only then) */
#if H5_VERSION_GE(1, 10, 7)
#define AG__H5_FILE_LOCKING(X) X(H5Pset_file_locking)
#else
#define AG__H5_FILE_LOCKING(X)
#endif

/* variables: the predefined types and property-list classes hdf5.h's constants read */
#define AG__H5_VARIABLES(X) \
    X(H5E_TRUNCATED_g) X(H5P_CLS_DATASET_CREATE_ID_g) X(H5P_CLS_FILE_ACCESS_ID_g) X(H5P_CLS_FILE_CREATE_ID_g) \
    X(H5P_CLS_GROUP_CREATE_ID_g) X(H5T_C_S1_g) X(H5T_IEEE_F32LE_g) X(H5T_IEEE_F64LE_g) X(H5T_NATIVE_DOUBLE_g) \
    X(H5T_NATIVE_FLOAT_g) X(H5T_NATIVE_INT64_g) X(H5T_NATIVE_UINT64_g) X(H5T_STD_I64LE_g) X(H5T_STD_U64LE_g)

/* a pointer to each: the type comes from hdf5.h's own declaration (__typeof__, GCC and Clang) */
typedef struct {
#define AG__H5_FIELD(name) __typeof__(name) *name;
    AG__H5_FUNCTIONS(AG__H5_FIELD)
    AG__H5_FILE_LOCKING(AG__H5_FIELD)
    AG__H5_VARIABLES(AG__H5_FIELD)
#undef AG__H5_FIELD
} ag__h5_table;

extern ag__h5_table ag__h5;

/* Loads libhdf5 (the first time) and fills ag__h5: true, or false with why in msg. A true holds
 * a process-wide lock until the matching ag__h5_release (HDF5's serial build is not
 * thread-safe: saves and loads from several threads take turns); not to be nested. */
bool ag__h5_acquire(char *msg, size_t size);
/* Hands back what HDF5's free lists and malloc hold, then the lock. */
void ag__h5_release(void);

#ifndef AG__H5_TABLE_ITSELF
#define H5Aclose                     ag__h5.H5Aclose
#define H5Acreate2                   ag__h5.H5Acreate2
#define H5Aexists                    ag__h5.H5Aexists
#define H5Aget_space                 ag__h5.H5Aget_space
#define H5Aget_type                  ag__h5.H5Aget_type
#define H5Aiterate2                  ag__h5.H5Aiterate2
#define H5Aopen                      ag__h5.H5Aopen
#define H5Aread                      ag__h5.H5Aread
#define H5Awrite                     ag__h5.H5Awrite
#define H5Dclose                     ag__h5.H5Dclose
#define H5Dcreate2                   ag__h5.H5Dcreate2
#define H5Dget_space                 ag__h5.H5Dget_space
#define H5Dget_type                  ag__h5.H5Dget_type
#define H5Dread                      ag__h5.H5Dread
#define H5Dwrite                     ag__h5.H5Dwrite
#define H5Eclear2                    ag__h5.H5Eclear2
#define H5Eget_auto2                 ag__h5.H5Eget_auto2
#define H5Eset_auto2                 ag__h5.H5Eset_auto2
#define H5Ewalk2                     ag__h5.H5Ewalk2
#define H5Fclose                     ag__h5.H5Fclose
#define H5Fcreate                    ag__h5.H5Fcreate
#define H5Fflush                     ag__h5.H5Fflush
#define H5Fis_hdf5                   ag__h5.H5Fis_hdf5
#define H5Fopen                      ag__h5.H5Fopen
#define H5Gclose                     ag__h5.H5Gclose
#define H5Gcreate2                   ag__h5.H5Gcreate2
#define H5Gget_create_plist          ag__h5.H5Gget_create_plist
#define H5Gget_info                  ag__h5.H5Gget_info
#define H5Gopen2                     ag__h5.H5Gopen2
#define H5Iget_type                  ag__h5.H5Iget_type
#define H5Lexists                    ag__h5.H5Lexists
#define H5Lget_name_by_idx           ag__h5.H5Lget_name_by_idx
#define H5Literate                   ag__h5.H5Literate
#define H5Oclose                     ag__h5.H5Oclose
#define H5Oopen                      ag__h5.H5Oopen
#define H5Pclose                     ag__h5.H5Pclose
#define H5Pcreate                    ag__h5.H5Pcreate
#define H5Pget_attr_creation_order   ag__h5.H5Pget_attr_creation_order
#define H5Pget_link_creation_order   ag__h5.H5Pget_link_creation_order
#define H5Pset_attr_creation_order   ag__h5.H5Pset_attr_creation_order
#define H5Pset_chunk                 ag__h5.H5Pset_chunk
#define H5Pset_fclose_degree         ag__h5.H5Pset_fclose_degree
#if H5_VERSION_GE(1, 10, 7)
#define H5Pset_file_locking          ag__h5.H5Pset_file_locking
#endif
#define H5Pset_fletcher32            ag__h5.H5Pset_fletcher32
#define H5Pset_istore_k              ag__h5.H5Pset_istore_k
#define H5Pset_libver_bounds         ag__h5.H5Pset_libver_bounds
#define H5Pset_link_creation_order   ag__h5.H5Pset_link_creation_order
#define H5Sclose                     ag__h5.H5Sclose
#define H5Screate                    ag__h5.H5Screate
#define H5Screate_simple             ag__h5.H5Screate_simple
#define H5Sget_simple_extent_dims    ag__h5.H5Sget_simple_extent_dims
#define H5Sget_simple_extent_ndims   ag__h5.H5Sget_simple_extent_ndims
#define H5Sget_simple_extent_npoints ag__h5.H5Sget_simple_extent_npoints
#define H5Sget_simple_extent_type    ag__h5.H5Sget_simple_extent_type
#define H5Tclose                     ag__h5.H5Tclose
#define H5Tcopy                      ag__h5.H5Tcopy
#define H5Tget_class                 ag__h5.H5Tget_class
#define H5Tget_sign                  ag__h5.H5Tget_sign
#define H5Tget_size                  ag__h5.H5Tget_size
#define H5Tget_strpad                ag__h5.H5Tget_strpad
#define H5Tis_variable_str           ag__h5.H5Tis_variable_str
#define H5Tset_cset                  ag__h5.H5Tset_cset
#define H5Tset_size                  ag__h5.H5Tset_size
#define H5Tset_strpad                ag__h5.H5Tset_strpad
#define H5check_version              ag__h5.H5check_version
#define H5free_memory                ag__h5.H5free_memory
#define H5garbage_collect            ag__h5.H5garbage_collect
#define H5open                       ag__h5.H5open
#define H5E_TRUNCATED_g              (*ag__h5.H5E_TRUNCATED_g)
#define H5P_CLS_DATASET_CREATE_ID_g  (*ag__h5.H5P_CLS_DATASET_CREATE_ID_g)
#define H5P_CLS_FILE_ACCESS_ID_g     (*ag__h5.H5P_CLS_FILE_ACCESS_ID_g)
#define H5P_CLS_FILE_CREATE_ID_g     (*ag__h5.H5P_CLS_FILE_CREATE_ID_g)
#define H5P_CLS_GROUP_CREATE_ID_g    (*ag__h5.H5P_CLS_GROUP_CREATE_ID_g)
#define H5T_C_S1_g                   (*ag__h5.H5T_C_S1_g)
#define H5T_IEEE_F32LE_g             (*ag__h5.H5T_IEEE_F32LE_g)
#define H5T_IEEE_F64LE_g             (*ag__h5.H5T_IEEE_F64LE_g)
#define H5T_NATIVE_DOUBLE_g          (*ag__h5.H5T_NATIVE_DOUBLE_g)
#define H5T_NATIVE_FLOAT_g           (*ag__h5.H5T_NATIVE_FLOAT_g)
#define H5T_NATIVE_INT64_g           (*ag__h5.H5T_NATIVE_INT64_g)
#define H5T_NATIVE_UINT64_g          (*ag__h5.H5T_NATIVE_UINT64_g)
#define H5T_STD_I64LE_g              (*ag__h5.H5T_STD_I64LE_g)
#define H5T_STD_U64LE_g              (*ag__h5.H5T_STD_U64LE_g)
#endif

#endif
