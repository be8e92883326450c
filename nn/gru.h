/* (being written) */
#ifndef AG_NN_GRU_H
#define AG_NN_GRU_H
#include "mha.h"
#endif
