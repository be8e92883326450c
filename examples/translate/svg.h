/* attograd-translate support: SVG pictures for a browser (attention heatmaps, training curves).
 * Files are written atomically (tr_write_atomic); failures return -1 with a message in err. */
#ifndef TR_SVG_H
#define TR_SVG_H

#include <stddef.h>

/* Attention of one sentence: weights (layers, heads, tgt_len, src_len) row-major, each in
 * [0, 1] (clamped; non-finite values are drawn grey). One heatmap per (layer, head), titled
 * "layer L head H" (0-based like the parameter names), source tokens label the columns and
 * target tokens the rows; hovering a cell shows its weight. title may be NULL. */
int tr_svg_attention(const char *path, const char *title, int layers, int heads, int tgt_len, int src_len,
                     const double *weights, const char *const *src_tokens, const char *const *tgt_tokens, char *err,
                     size_t errsz);

typedef struct {
    const char *label;   /* legend text */
    const double *x, *y; /* n points in increasing x; a non-finite y breaks the line */
    int n;
    int panel; /* 0: upper panel (e.g. loss), 1: lower panel (e.g. accuracy), ... */
} tr_svg_series;

#define TR_SVG_MAX_PANELS 6

/* Line chart of training curves: one or two panels (the lower one only if a series uses it)
 * sharing the x axis, with ticks, grid, axis labels and a legend. The x axis starts at 0 (or
 * below, at a negative x). Labels may be NULL. */
int tr_svg_curves(const char *path, const char *title, const char *xlabel, const char *ylabel_upper,
                  const char *ylabel_lower, int nseries, const tr_svg_series *series, char *err, size_t errsz);
/* The same with npanels panels (1 to TR_SVG_MAX_PANELS) stacked top to bottom, each drawn
 * whether a series uses it or not, panel p labelled ylabels[p] (ylabels or an entry may be NULL) */
int tr_svg_panels(const char *path, const char *title, const char *xlabel, int npanels,
                  const char *const *ylabels, int nseries, const tr_svg_series *series, char *err, size_t errsz);

#endif
