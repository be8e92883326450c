/* The training state of a checkpoint: plain data with named RNGs and config entries. */
#include <string.h>

#include "checkpoint.h"

/* ---- training state ----------------------------------------------------------------------- */

static bool name_ok(const char *op, const ag_train_state *s, const char *name) {
    if (!s || !name || !*name || strlen(name) >= AG_CKPT_NAME_MAX) {
        ag_error(op, "'%s': needs a state and a name of 1 to %d bytes", name ? name : "(null)", AG_CKPT_NAME_MAX - 1);
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
    if (i == AG_CKPT_MAX_RNGS) {
        ag_error(op, "'%s': the state already holds %d rngs, the most it can", name, AG_CKPT_MAX_RNGS);
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

static const ag_config_entry *config_find(const ag_train_state *s, const char *key) {
    for (int i = 0; s && key && i < s->nconfig; i++)
        if (strcmp(s->config[i].key, key) == 0) return &s->config[i];
    return NULL;
}

/* the entry for key, zeroed (new or replaced); NULL after reporting */
static ag_config_entry *config_slot(const char *op, ag_train_state *s, const char *key) {
    if (!name_ok(op, s, key)) return NULL;
    ag_config_entry *e = (ag_config_entry *)config_find(s, key);
    if (!e) {
        if (s->nconfig == AG_CKPT_MAX_CONFIG) {
            ag_error(op, "'%s': the state already holds %d config entries, the most it can", key, AG_CKPT_MAX_CONFIG);
            return NULL;
        }
        e = &s->config[s->nconfig++];
    }
    memset(e, 0, sizeof *e);
    strcpy(e->key, key);
    return e;
}

bool ag_config_set_int(ag_train_state *s, const char *key, int64_t value) {
    ag_config_entry *e = config_slot("ag_config_set_int", s, key);
    if (e) e->type = AG_CONFIG_INT, e->i = value;
    return e != NULL;
}

bool ag_config_set_double(ag_train_state *s, const char *key, double value) {
    ag_config_entry *e = config_slot("ag_config_set_double", s, key);
    if (e) e->type = AG_CONFIG_DOUBLE, e->d = value;
    return e != NULL;
}

bool ag_config_set_string(ag_train_state *s, const char *key, const char *value) {
    const char *op = "ag_config_set_string";
    if (!value || strlen(value) >= AG_CKPT_STRING_MAX) {
        ag_error(op, "'%s': value is NULL or longer than %d bytes", key ? key : "(null)", AG_CKPT_STRING_MAX - 1);
        return false;
    }
    ag_config_entry *e = config_slot(op, s, key);
    if (e) e->type = AG_CONFIG_STRING, strcpy(e->s, value);
    return e != NULL;
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
