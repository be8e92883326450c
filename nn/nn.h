/* attograd nn: layers with PyTorch 1.13's semantics, parameter names and shapes.
 *
 * Conventions:
 * - A module is a plain struct of parameter tensors, created by ag_<module>_new(params, prefix,
 *   ...) which adds its parameters to an ag_params slab under PyTorch's dotted state_dict names
 *   (prefix "encoder.layers.0.self_attn" gives "encoder.layers.0.self_attn.in_proj_weight") and
 *   initialises them as PyTorch does. Forward functions take the module and tensors and return
 *   tensors from the current arena; they work in f32 and f64 (the params' dtype).
 * - Functional forms (ag_linear, ag_layer_norm, ag_cross_entropy, ...) are single fused ops
 *   with their backward beside them (tensor/node.h).
 * - Hyperparameters go in config structs made by a _defaults() function with PyTorch's
 *   defaults (ag_mha_defaults, ag_adam_defaults, ag_loss_defaults, ...), fields set by name. */
#ifndef AG_NN_H
#define AG_NN_H
#include "../autograd/autograd.h"
#include "layers/layers.h"
#include "attention/attention.h"
#include "attention/mha.h"
#include "attention/seq2seq_attention.h"
#include "transformer/transformer.h"
#include "recurrent/gru.h"
#include "recurrent/lstm.h"
#include "recurrent/rnn.h"
#include "training/optim.h"
#include "decode/decode.h"
#include "checkpoint/checkpoint.h"
#endif
