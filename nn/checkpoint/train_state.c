/* The training state of a checkpoint: named RNGs and config entries (a growable array of
 * entries whose strings live on the heap, owned by the state). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"

/* ---- training state ----------------------------------------------------------------------- */

static bool name_ok(const char *op, const ag_train_state *s, const char *name) {
    if (!s || !name || !*name || strlen(name) >= AG_CHECKPOINT_NAME_MAX) {
        ag_error(op, "'%s': needs a state and a name of 1 to %d bytes", name ? name : "(null)", AG_CHECKPOINT_NAME_MAX - 1);
        return false;
    }
    return true;
}

bool ag_state_set_rng(ag_train_state *s, const char *name, const ag_rng *rng) {
    const char *op = "ag_state_set_rng";
    if (!name_ok(op, s, name)) return false;
    if (!rng) {
        ag_error(op, "'%s': rng is NULL", name);
        return false;
    }
    int i = 0;
    while (i < s->nrng && strcmp(s->rng[i].name, name) != 0) i++;
    if (i == AG_CHECKPOINT_MAX_RNGS) {
        ag_error(op, "'%s': the state already holds %d rngs, the most it can", name, AG_CHECKPOINT_MAX_RNGS);
        return false;
    }
    if (i == s->nrng) {
        memset(&s->rng[i], 0, sizeof s->rng[i]);
        strcpy(s->rng[i].name, name);
        s->nrng++;
    }
    s->rng[i].rng = *rng;
    return true;
}

bool ag_state_get_rng(const ag_train_state *s, const char *name, ag_rng *out) {
    for (int i = 0; s && name && i < s->nrng; i++)
        if (strcmp(s->rng[i].name, name) == 0) {
            if (out) *out = s->rng[i].rng;
            return true;
        }
    return false;
}

void ag_train_state_clear(ag_train_state *s) {
    if (!s) return;
    for (int i = 0; i < s->nconfig; i++) free(s->config[i].s);
    free(s->config);
    memset(s, 0, sizeof *s);
}

/* room for one more entry; false on out of memory (nothing reported: the callers do) */
static bool config_grow(ag_train_state *s) {
    if (s->nconfig < s->config_cap) return true;
    if (s->config_cap > INT_MAX / 2 - 8) return false;
    int cap = s->config_cap ? 2 * s->config_cap : 16;
    ag_config_entry *c = realloc(s->config, sizeof *c * (size_t)cap);
    if (!c) return false;
    s->config = c;
    s->config_cap = cap;
    return true;
}

bool ag__config_append(ag_train_state *s, const ag_config_entry *e) {
    if (!config_grow(s)) return false;
    s->config[s->nconfig++] = *e;
    return true;
}

bool ag_train_state_copy(ag_train_state *dst, const ag_train_state *src) {
    if (!dst || !src) {
        ag_error("ag_train_state_copy", "needs two states, got %s", dst ? "a NULL source" : "a NULL destination");
        return false;
    }
    if (dst == src) return true;
    ag_train_state c = *src;
    c.config = NULL;
    c.nconfig = c.config_cap = 0;
    for (int i = 0; i < src->nconfig; i++) {
        ag_config_entry e = src->config[i];
        e.s = e.type == AG_CONFIG_STRING ? strdup(src->config[i].s ? src->config[i].s : "") : NULL;
        if (e.type == AG_CONFIG_STRING && !e.s) goto oom;
        if (!ag__config_append(&c, &e)) {
            free(e.s);
            goto oom;
        }
    }
    ag_train_state_clear(dst);
    *dst = c;
    return true;
oom:
    ag_train_state_clear(&c);
    ag_error("ag_train_state_copy", "out of memory copying %d config entries", src->nconfig);
    return false;
}

static const ag_config_entry *config_find(const ag_train_state *s, const char *key) {
    for (int i = 0; s && key && i < s->nconfig; i++)
        if (strcmp(s->config[i].key, key) == 0) return &s->config[i];
    return NULL;
}

/* Set key to the value in *v (key and s filled in here; a string in v->s is taken over), new
 * or replacing; false after reporting (v->s is then freed). */
static bool config_put(const char *op, ag_train_state *s, const char *key, ag_config_entry *v) {
    if (!name_ok(op, s, key)) {
        free(v->s);
        return false;
    }
    memcpy(v->key, key, strlen(key) + 1);
    ag_config_entry *e = (ag_config_entry *)config_find(s, key);
    if (e) {
        free(e->s);
        *e = *v;
        return true;
    }
    if (!ag__config_append(s, v)) {
        ag_error(op, "'%s': out of memory for config entry %d", key, s->nconfig + 1);
        free(v->s);
        return false;
    }
    return true;
}

bool ag_config_set_int(ag_train_state *s, const char *key, int64_t value) {
    ag_config_entry v = {.type = AG_CONFIG_INT, .i = value};
    return config_put("ag_config_set_int", s, key, &v);
}

bool ag_config_set_double(ag_train_state *s, const char *key, double value) {
    ag_config_entry v = {.type = AG_CONFIG_DOUBLE, .d = value};
    return config_put("ag_config_set_double", s, key, &v);
}

bool ag_config_set_string(ag_train_state *s, const char *key, const char *value) {
    const char *op = "ag_config_set_string";
    if (!value) {
        ag_error(op, "'%s': value is NULL", key ? key : "(null)");
        return false;
    }
    ag_config_entry v = {.type = AG_CONFIG_STRING, .s = strdup(value)};
    if (!v.s) {
        ag_error(op, "'%s': out of memory for a string of %zu bytes", key ? key : "(null)", strlen(value));
        return false;
    }
    return config_put(op, s, key, &v);
}

bool ag_config_remove(ag_train_state *s, const char *key) {
    ag_config_entry *e = (ag_config_entry *)config_find(s, key);
    if (!e) return false;
    free(e->s);
    int i = (int)(e - s->config);
    memmove(e, e + 1, sizeof *e * (size_t)(s->nconfig - i - 1));
    s->nconfig--;
    return true;
}

bool ag_config_get_int(const ag_train_state *s, const char *key, int64_t *out) {
    const ag_config_entry *e = config_find(s, key);
    if (!e || e->type != AG_CONFIG_INT) return false;
    if (out) *out = e->i;
    return true;
}

bool ag_config_get_double(const ag_train_state *s, const char *key, double *out) {
    const ag_config_entry *e = config_find(s, key);
    if (!e || e->type == AG_CONFIG_STRING) return false;
    if (out) *out = e->type == AG_CONFIG_INT ? (double)e->i : e->d;
    return true;
}

const char *ag_config_get_string(const ag_train_state *s, const char *key) {
    const ag_config_entry *e = config_find(s, key);
    return e && e->type == AG_CONFIG_STRING ? e->s : NULL;
}
