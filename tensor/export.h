/* AG_API marks what the shared library exports: every function and variable of the installed
 * headers, the user API and op.h's op-author API. The library is compiled with hidden
 * visibility by default (meson's gnu_symbol_visibility), so everything else in it stays
 * internal and binds locally; tests/check_exports.py compares the two lists. */
#ifndef AG_EXPORT_H
#define AG_EXPORT_H
#if defined(__GNUC__) || defined(__clang__)
#define AG_API __attribute__((visibility("default")))
#else
#define AG_API
#endif
#endif
