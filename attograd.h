/* attograd: one header for the whole library. */
#ifndef ATTOGRAD_H
#define ATTOGRAD_H
#include "tensor/tensor.h"
#include "autograd/autograd.h"
#include "nn/nn.h"
#include "data/data.h"
#include "attograd_config.h" /* AG_HAVE_MPI: built with data-parallel training over MPI */
#ifdef AG_HAVE_MPI
#include "nn/dist/dist.h"
#endif
#endif
