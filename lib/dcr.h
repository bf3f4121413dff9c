/* dcr.h - libdcr, exact delta refit of LLM weights: the whole public API.
 *
 * Include this one header; compile with `pkg-config --cflags --libs dcr`.
 * The library is in four wings, and arrows point down only:
 *
 *   placement/  layout maps, generators, rank diff and merge, placement
 *   refit/      diff, apply, journal, receiver state, commit, retry, squash,
 *               verify
 *   transport/  stores behind one table of operations, the transfer pipeline
 *   core/       safetensors, checkpoints, dtypes, digests and state ids,
 *               delta streams, item codecs, payloads, manifests, packs,
 *               the CUDA device primitives (core/cuda.h)
 *
 * The library never prints and never exits: every fallible function returns
 * 0 (or a count) on success and a negative errno-style code or DCR_E* on
 * failure, after filling the caller's struct dcr_err. See libdcr(3).
 */
#ifndef DCR_H
#define DCR_H

#define DCR_VERSION_STRING "0.1.0"

#include "core/error.h"
#include "core/dtype.h"
#include "core/digest.h"
#include "core/blake3.h"
#include "core/buf.h"
#include "core/file.h"
#include "core/util.h"
#include "core/fault.h"
#include "core/safetensors.h"
#include "core/checkpoint.h"
#include "core/state.h"
#include "core/codec.h"
#include "core/item.h"
#include "core/delta.h"
#include "core/payload.h"
#include "core/manifest.h"
#include "core/pack.h"
#include "core/packio.h"
#include "core/sign.h"
#include "core/cuda.h"
#include "core/trust.h"

#include "transport/store.h"
#include "transport/transfer.h"
#include "transport/relay.h"

#include "refit/receiver.h"
#include "refit/diff.h"
#include "refit/apply.h"
#include "refit/apply-input.h"
#include "refit/apply-pack.h"
#include "refit/apply-mem.h"
#include "refit/commit.h"
#include "refit/policy.h"
#include "refit/retry.h"
#include "refit/squash.h"
#include "refit/verify.h"
#include "refit/version.h"

#include "placement/layout.h"
#include "placement/layout-gen.h"
#include "placement/rankdiff.h"
#include "placement/merge.h"
#include "placement/place.h"

#endif
