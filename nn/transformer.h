/* (being written) */
#ifndef AG_NN_TRANSFORMER_H
#define AG_NN_TRANSFORMER_H
#include "mha.h"
#endif
