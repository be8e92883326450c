/* attograd: one header for the whole library. */
#ifndef ATTOGRAD_H
#define ATTOGRAD_H
#include "tensor/tensor.h"
#include "autograd/autograd.h"
#include "nn/nn.h"
#include "data/data.h"
#endif
